"""The run facts every report opens with: when, against what, which model and scenario, how long,
simulated or real, the SLO judged, and what the run's accounting says against it.

The target comes from meta.json (the URL the load was sent to), else the scenario copy; it is
printed without credentials: no user info, and the value of any credential-named query parameter
replaced by the redaction marker (contracts/redaction.py). A run against the embedded simulator
(scenario.yaml `target.url: embedded`, a `simulator_truth.jsonl` beside the records, or meta.json
`simulated: true`) is marked simulated: its GPU readings come from a model, not a GPU.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from capacity_plugins.contracts.meta import Meta
from capacity_plugins.contracts.planning import SLOConfig
from capacity_plugins.contracts.redaction import REDACTED, is_secret_name, strip_userinfo
from capacity_plugins.contracts.summary import InvalidStep, RunFacts, StepSummary
from capacity_plugins.scenario.sections import EMBEDDED

TRUTH_FILE = "simulator_truth.jsonl"
LIMITS = (("ttft_p95_ms", "TTFT"), ("tpot_p95_ms", "TPOT"), ("e2e_p95_ms", "E2E"), ("itl_p95_ms", "ITL"),
          ("first_visible_p95_ms", "time to first output token"), ("tpot_visible_p95_ms", "visible TPOT"))


def redact_url(url: str) -> str:
    """`http://user:pw@host/x?api_key=K&a=1` → `http://host/x?api_key=<redacted>&a=1`."""
    try:
        parts = urlsplit(strip_userinfo(url))
    except ValueError:
        return REDACTED  # not a URL we can take apart: print nothing of it
    if not parts.query:
        return urlunsplit(parts)
    query = [(k, REDACTED if is_secret_name(k) else v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    return urlunsplit(parts._replace(query=urlencode(query, safe="<>")))


def simulated_because(path: Path, meta: Meta, target: dict[str, Any]) -> str | None:
    """Why this run's target was the embedded simulator (None: a real server, as far as the folder says)."""
    if meta.simulated is True:
        return "meta.json says simulated"
    if target.get("url") == EMBEDDED:
        return "scenario.yaml target.url: embedded (the built-in simulator)"
    if (path / TRUTH_FILE).exists():
        return f"{TRUTH_FILE} is present (written by the embedded simulator)"
    return None


def slo_lines(slo: SLOConfig) -> list[str]:
    """The SLO limits judged, each with the key that set it."""
    pct = f"P{slo.attainment * 100:g}"
    out = [f"{name} {pct} ≤ {getattr(slo, key):g} ms (slo.{key})" for key, name in LIMITS if getattr(slo, key) is not None]
    out.append(f"errors ≤ {slo.error_rate:.1%} (slo.error_rate)")
    return out


def _utc(unix: float | None) -> str | None:
    return None if unix is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix))


def run_facts(path: Path, meta: Meta, settings: Any, steps: list[Any], rows: list[StepSummary]) -> RunFacts:
    starts = [s.start_unix for s in steps if s.start_unix is not None]
    ends = [s.drain_end_unix or s.end_unix for s in steps if (s.drain_end_unix or s.end_unix) is not None]
    start = meta.start_unix if meta.start_unix is not None else (min(starts) if starts else None)
    end = meta.end_unix if meta.end_unix is not None else (max(ends) if ends else None)
    target = meta.target or settings.target.get("url")
    sim = simulated_because(path, meta, settings.target)
    return RunFacts(
        date_utc=_utc(start), start_unix=start, end_unix=end,
        duration_s=(end - start) if start is not None and end is not None else None,
        target=None if target is None else (EMBEDDED if target == EMBEDDED else redact_url(str(target))),
        model=meta.model or settings.target.get("model"),
        dialect=meta.dialect or settings.target.get("dialect"),
        scenario=settings.name, load_kind=settings.load_kind,
        simulated=sim is not None, simulated_because=sim,
        complete=not meta.incomplete, incomplete_reason=meta.incomplete_reason,
        workers_lost=meta.lost_workers(), records=meta.records,
        slo_limits=slo_lines(settings.slo), confidence=settings.verdict.confidence,
        min_requests=settings.min_requests,
        invalid_steps=[InvalidStep(step=r.step, level=r.level, reasons=r.invalid_reasons) for r in rows if not r.valid],
    )
