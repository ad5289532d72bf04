"""What a scenario of an embeddings or rerank dialect must say (contracts.dialects.ITEM_DIALECTS).

Such a server answers each request whole — no stream, no first token, no output tokens — so the
request is not streamed and the SLO judges the whole answer's latency (`e2e_p95_ms`) only. Each
rule broken is one line naming the key to change.
"""

from __future__ import annotations

from capacity_plugins.contracts.dialects import ITEM_DIALECTS
from capacity_plugins.contracts.planning import SLOConfig
from capacity_plugins.scenario.sections import RequestConfig

STREAMED_LIMITS = ("ttft_p95_ms", "tpot_p95_ms", "itl_p95_ms")


def items_problem(dialect: str, request: RequestConfig, slo: SLOConfig) -> str | None:
    kind = ITEM_DIALECTS.get(dialect)
    if kind is None:
        return None
    if request.stream:
        return (f"request.stream: the {dialect} dialect ({kind}) answers each request whole; "
                "set stream: false")
    for key in STREAMED_LIMITS:
        if getattr(slo, key) is not None:
            return (f"slo.{key}: {kind} requests have no tokens streamed, so no {key[:-7].upper()}; "
                    f"set {key}: null and judge them on e2e_p95_ms")
    if slo.e2e_p95_ms is None:
        return f"slo.e2e_p95_ms: {kind} requests are judged on their latency; set a limit"
    return None
