"""Plan (nodes, GPUs) and cost from the capacity per node.

nodes = ceil(peak_qps × safety_factor / capacity_per_node) + redundancy (e.g. 300 × 1.5 / 50
= 9); GPUs = nodes × gpus_per_node. The concurrency view: peak concurrency / concurrency one GPU
carries under the SLO (200 / 20 = 10), without extra factors. No 70 % cap on top of an
SLO-measured capacity (double headroom): the 70 % figure here is only the trigger "traffic above
70 % of current capacity" (`verdict.trigger_share`, docs/capacity.md).

The plan refuses (`refused`: the reason; no node count) when the data cannot carry a decision:
an unknown capacity (no valid step, or the SLO already failing at the lowest valid level, below
which nothing was measured: the reason says what was not measured and what to run next), a
capacity interval that reaches 0 (not even the lowest level surely meets the SLO), or one wider
than `verdict.max_capacity_interval` of the capacity. An SLO that surely fails with one request at
a time (capacity.py `fails_at_lowest_load`) is no refusal but an answer (`infeasible`): no number
of nodes meets it. Otherwise the plan gives the node count at the capacity's point and the range
its interval allows (`nodes_interval`).

Notes and refusals are plain words; the settings that decided them are listed apart in
`settings` ({key, value, meaning}, the verdict's shape), never inside a sentence.
"""

from __future__ import annotations

import math
from typing import Any

from capacity_plugins.analysis.capacity import BRACKET_INTERVAL
from capacity_plugins.contracts.planning import CapacityConfig, VerdictConfig
from capacity_plugins.contracts.summary import Capacity, Cost, Plan, Setting, StepSummary


def _nodes(peak_qps: float, cap: CapacityConfig, per_node: float) -> int:
    return math.ceil(round(peak_qps * cap.safety_factor / per_node, 9)) + cap.redundancy


INFEASIBLE = "the SLO fails already with one request at a time: no number of nodes meets it"


def infeasible(capacity: Capacity) -> bool:
    """The SLO surely fails at the lowest load: capacity 0 at both ends of its interval."""
    ci = capacity.per_node_rps_ci
    return capacity.per_node_rps == 0 and (not ci or not ci[1])


def refusal(capacity: Capacity, vc: VerdictConfig) -> str | None:
    """Why the data cannot size a fleet (None: it can, or it showed that no fleet meets the SLO)."""
    per_node = capacity.per_node_rps
    if per_node is None:
        why = capacity.unknown_reason or f"capacity under the SLO unknown ({capacity.method})"
        todo = capacity.measure_next
        return f"{why}" + (f" — {todo}" if todo else "")
    ci = capacity.per_node_rps_ci
    if infeasible(capacity):
        return None
    if per_node <= 0:  # not infeasible: so its interval reaches above 0
        top = f" (capacity up to {ci[1]:.3g} rps)" if ci else ""
        return (f"the SLO fails at the lowest load as measured, but within the noise it may hold{top}: "
                "measure longer steps at low load")
    if ci and ci[0] is not None and ci[0] <= 0:
        return (f"the capacity interval reaches 0 ({ci[0]:.3g}–{ci[1]:.3g} rps): the data cannot show that "
                "one node meets the SLO at any load")
    rel = capacity.relative_interval
    if ci and rel is not None and rel > vc.max_capacity_interval:
        return (f"the capacity interval {ci[0]:.3g}–{ci[1]:.3g} req/s is {rel:.0%} of the capacity "
                f"({per_node:.3g} req/s), wider than the {vc.max_capacity_interval:.0%} a plan is sized from: "
                + _to_narrow(capacity, rel, vc.max_capacity_interval))
    return None


def _to_narrow(capacity: Capacity, rel: float, most: float) -> str:
    """What would bring a too-wide capacity interval under `most`: levels between the bracket's ends
    when the interval spans a bracket wider than a doubling (more requests cannot narrow that), else
    requests per step — a step's intervals narrow with √n, so n × (rel / most)² of them."""
    lo, hi = capacity.last_pass_level, capacity.first_fail_level
    if (capacity.bracket_width or 0.0) > BRACKET_INTERVAL and lo is not None and hi is not None:
        return f"add levels between {lo:g} and {hi:g} (the interval spans that whole bracket)"
    n = capacity.bracket_requests
    if not n:
        return "measure longer steps (more requests per step) or repeat the run"
    need = math.ceil(n * (rel / most) ** 2)
    return (f"≈ {need:,} requests per step where the SLO is crossed (now {n:,}) would narrow it: longer steps, "
            f"or --repeat {math.ceil(need / n)}")


def make_plan(capacity: Capacity, cap: CapacityConfig, vc: VerdictConfig | None = None) -> Plan:
    vc = vc or VerdictConfig()
    per_node = capacity.per_node_rps
    plan = Plan(
        peak_qps=cap.peak_qps, peak_concurrency=cap.peak_concurrency, safety_factor=cap.safety_factor,
        redundancy=cap.redundancy, current_nodes=cap.current_nodes, gpus_per_node=cap.gpus_per_node,
        nodes=None, nodes_interval=None, gpus=None, gpus_by_concurrency=None, per_gpu_concurrency=None,
        peak_share_of_current_capacity=None, trigger_share=vc.trigger_share, trigger_reached=None,
        refused=None, infeasible=None, notes=[], settings=[],
    )

    def used(key: str, value: Any, meaning: str) -> None:
        if all(x.key != key for x in plan.settings):
            plan.settings.append(Setting(key=key, value=value, meaning=meaning))

    why_not = refusal(capacity, vc)
    rel = capacity.relative_interval
    if why_not is not None and rel is not None and rel > vc.max_capacity_interval and capacity.per_node_rps:
        used("verdict.max_capacity_interval", vc.max_capacity_interval,
             "widest capacity interval, as a share of the capacity, a plan is sized from")
    if cap.peak_qps is None:
        plan.notes.append("no forecast peak: give one (--peak-qps, or the scenario's capacity section) to size the fleet")
    elif infeasible(capacity):
        plan.infeasible = INFEASIBLE
        plan.notes.append(INFEASIBLE)
        why_not = INFEASIBLE  # nothing below applies either
    elif why_not is not None:
        plan.refused = why_not
        plan.notes.append(f"plan refused: {why_not}")
    else:
        assert per_node is not None  # refusal() said why not otherwise
        nodes = plan.nodes = _nodes(cap.peak_qps, cap, per_node)
        used("capacity.safety_factor", cap.safety_factor, "the forecast peak is multiplied by this before sizing")
        used("capacity.redundancy", cap.redundancy, "spare nodes added on top (N+k)")
        plan.gpus = nodes * cap.gpus_per_node
        ci = capacity.per_node_rps_ci
        if ci and ci[0] is not None and ci[1] is not None:
            plan.nodes_interval = [_nodes(cap.peak_qps, cap, ci[1]), _nodes(cap.peak_qps, cap, ci[0])]
    conc = capacity.per_node_concurrency
    if conc and why_not is None:
        per_gpu = plan.per_gpu_concurrency = conc / cap.gpus_per_node
        if cap.peak_concurrency is not None:
            plan.gpus_by_concurrency = math.ceil(round(cap.peak_concurrency / per_gpu, 9))
    if cap.peak_qps is not None and per_node and why_not is None:
        fleet = per_node * (cap.current_nodes if cap.current_nodes else 1)
        share = cap.peak_qps / fleet
        plan.peak_share_of_current_capacity = share
        plan.trigger_reached = share >= vc.trigger_share
        who = ((f"{cap.current_nodes} current nodes carry" if cap.current_nodes != 1 else "the 1 current node carries") if cap.current_nodes
               else "one node carries (the current node count is not given)")
        plan.notes.append(f"the forecast peak of {cap.peak_qps:g} req/s is {share:.0%} of what {who}"
                          + (f" — above the {vc.trigger_share:.0%} at which planning starts"
                             if share >= vc.trigger_share else ""))
        used("verdict.trigger_share", vc.trigger_share, "share of the current capacity at which planning starts")
    return plan


def make_cost(rows: list[StepSummary], capacity: Capacity, cap: CapacityConfig) -> Cost:
    cost = Cost(gpu_hour_usd=cap.gpu_hour_usd, per_1k_requests_usd=None, per_1k_requests_ci_usd=None,
                per_1m_output_tokens_usd=None, per_effective_output_usd=None, basis=None)
    per_node = capacity.per_node_rps
    if cap.gpu_hour_usd is None:
        cost.basis = "no gpu_hour_usd given"
        return cost
    node_usd_per_s = cap.gpu_hour_usd * cap.gpus_per_node / 3600.0
    passing = [r for r in rows if r.valid and r.slo_pass]
    ref = max(passing, key=lambda r: r.level) if passing else None
    if per_node:
        cost.per_1k_requests_usd = node_usd_per_s / per_node * 1000
        ci = capacity.per_node_rps_ci
        if ci and ci[0] is not None and ci[1] is not None and ci[0] > 0:  # cost falls as capacity rises: the ends swap
            cost.per_1k_requests_ci_usd = [node_usd_per_s / ci[1] * 1000, node_usd_per_s / ci[0] * 1000]
        toks = ref.output_tokens_mean if ref else None
        if toks:
            cost.per_1m_output_tokens_usd = node_usd_per_s / (per_node * toks) * 1e6
        cost.basis = f"one node at its capacity under the SLO ({per_node:.3g} rps)"
    if ref is not None and ref.goodput_rps:
        # Cost divided over the outputs that succeeded *and* met the SLO only (docs/capacity.md).
        node_rps = ref.goodput_rps / cap.replicas_behind_url
        cost.per_effective_output_usd = node_usd_per_s / node_rps
        cost.effective_share = ref.good_requests / ref.requests if ref.requests else None
        cost.effective_basis_level = ref.level
    return cost
