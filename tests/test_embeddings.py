"""Embeddings and rerank as request kinds: the four dialects against the simulator's routes, the
scenario's rules, and a sweep whose items/s at saturation is the simulator's closed form."""

from __future__ import annotations

import json
import urllib.request

import pytest
import yaml
from helpers.processes import capacity
from helpers.results import read_records, results_dir
from helpers.scenarios import scenario_error, write_yaml

from capacity_plugins.contracts.dialects import ITEM_DIALECTS
from capacity_plugins.contracts.summary import load_summary
from capacity_plugins.corpus.sample import Sample
from capacity_plugins.dialects import RequestParams, get_dialect
from capacity_plugins.outputs.items_text import ItemsReport
from capacity_plugins.simulator.tokens import count_tokens

SIMULATOR = {"max_num_seqs": 4}
SLOTS, BATCH = 4, 8


@pytest.mark.parametrize("name", sorted(ITEM_DIALECTS))
def test_each_dialect_sends_its_batch_and_reads_the_simulators_answer(simulator, name):
    sample = Sample.make("p", prompt="the quick brown fox jumps over the lazy dog " * 4)
    dialect = get_dialect(name)
    call = dialect.build(sample, RequestParams(model="sim-model", stream=False, batch_size=3))
    sent = json.loads(call.body)
    items = sent.get("input") or sent.get("inputs") or sent.get("documents") or sent.get("texts")
    assert len(items) == len(set(items)) == 3  # three different texts: no prefix cache serves one from another
    req = urllib.request.Request(simulator.url + call.path, data=call.body, headers=call.headers)
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
    p = dialect.parser(False)
    p.full(body)
    assert p.done and p.error is None
    per_item = [count_tokens(t) for t in items]
    if ITEM_DIALECTS[name] == "rerank":  # each document is scored with the query
        per_item = [n + count_tokens(sent["query"]) for n in per_item]
    # the OpenAI / vLLM forms report the input tokens; TEI's native ones do not
    assert p.prompt_tokens == (sum(per_item) if name in ("openai-embeddings", "rerank") else None)


def test_an_embeddings_scenario_is_not_streamed_and_is_judged_on_e2e(tmp_path):
    head = "target: {url: embedded, dialect: rerank}\n"
    assert "request.stream" in scenario_error(tmp_path, head)
    msg = scenario_error(tmp_path, head + "request: {stream: false}\nslo: {tpot_p95_ms: null}\n")
    assert msg.endswith("slo.ttft_p95_ms: rerank requests have no tokens streamed, so no TTFT; "
                        "set ttft_p95_ms: null and judge them on e2e_p95_ms")
    assert "request.batch_size" in scenario_error(tmp_path, head + "request: {stream: false, batch_size: 0}\n")


@pytest.mark.slow
@pytest.mark.measured  # items/s at saturation against the closed form
def test_items_per_second_at_saturation_is_the_simulators_closed_form(tmp_path):
    # 4 slots, 8 items of ~65 tokens per request: with 8 users every step admits 4 requests (4 wait)
    # and lasts 8 ms + 1 ms × 4 + 4 × tokens / 20 000 tokens/s: items/s = 4 × 8 / that step.
    doc = {
        "name": "emb",
        "target": {"url": "embedded", "dialect": "openai-embeddings", "simulator": {"max_num_seqs": SLOTS}},
        "corpus": {"path": "synthetic:prompt_tokens=64,n=2000,seed=1", "min_distinct": 1000},
        "request": {"stream": False, "batch_size": BATCH, "timeout_s": 30},
        "load": {"kind": "concurrency_sweep", "levels": [1, 2 * SLOTS], "step_s": 4, "warmup_s": 1,
                 "min_requests": 20, "max_loop_lag_p99_ms": 500},
        "slo": {"ttft_p95_ms": None, "tpot_p95_ms": None, "e2e_p95_ms": 100},
        "output": str(tmp_path / "results"),
    }
    r = capacity("run", str(write_yaml(tmp_path, yaml.safe_dump(doc))), "--no-analyze", timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    folder = results_dir(r.stdout)
    a = capacity("analyze", str(folder), "--quiet", "--no-report", timeout=180)
    assert a.returncode in (0, 1), a.stdout[-3000:] + a.stderr[-3000:]
    recs = [x for x in read_records(folder) if x["step"] == 1 and not x["warmup"] and x["ok"]]
    tokens = sum(x["prompt_tokens"] for x in recs) / len(recs)
    assert tokens == pytest.approx(BATCH * 65, rel=0.05)  # the server's usage: 8 items of the corpus's length
    step_s = (8.0 + 1.0 * SLOTS) / 1000 + SLOTS * tokens / 20000
    expected = SLOTS * BATCH / step_s
    s = load_summary(folder / "summary.json")
    items = s.item_rates  # type: ignore[union-attr]
    assert items is not None and items.kind == "embeddings" and items.batch_size == BATCH
    sat = items.steps[1]
    assert sat.valid and sat.items_per_s_ci is not None
    lo, hi = sat.items_per_s_ci
    assert lo <= expected <= hi, (sat.items_per_s, sat.items_per_s_ci, expected)
    assert sat.input_tokens_per_s == pytest.approx(sat.items_per_s * tokens / BATCH, rel=0.1)
    # the capacity decision as for generation: the E2E limit fails at 8 users, the capacity in items/s
    # is the requests/s one × batch_size, and the report says it
    assert s.capacity.limiting_slo == "e2e_ms" and s.capacity.per_node_rps is not None  # type: ignore[union-attr]
    assert items.per_node_items_per_s == pytest.approx(s.capacity.per_node_rps * BATCH)  # type: ignore[union-attr]
    assert s.verdict.decision  # type: ignore[union-attr]
    assert "items/s within the SLO" in ItemsReport().markdown(s)[3]  # type: ignore[arg-type]
