"""RunContext: everything a run's users and sinks share, attached as `environment.capacity`.

One object, built once per process by `plugin.register()` from the options; users read it, sinks
write through it. The seams below let the rehearsal (shapes, open-loop arrivals), the live view and
the telemetry change *who sends when* and *who sees records* without touching users.py:

- `step_provider(now_unix) -> (step index | None, is_warmup)`: stamped on every record at send.
- `pacer`: None = closed loop. Otherwise `pacer.wait_next() -> float | None` blocks (gevent) until
  this user's next scheduled send and returns its scheduled_unix; None = no arrival now (the user
  idles briefly and asks again).
- `extra_meta`: merged into meta.json at the end of the run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from capacity_plugins.client.backoff import Backoff
from capacity_plugins.client.pacer import Pacer
from capacity_plugins.client.sessions import SessionStore
from capacity_plugins.client.tokens import TokenCountEvidence
from capacity_plugins.contracts.options import LLMOptions
from capacity_plugins.contracts.redaction import Secrets, basic_auth
from capacity_plugins.dialects import Dialect, RequestParams, get_dialect
from capacity_plugins.errors import UserError
from capacity_plugins.sinks.stats import LLMStats

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from capacity_plugins.client.lane import WorkloadLane
    from capacity_plugins.corpus import Corpus, Sampler
    from capacity_plugins.rehearsal.workloads import ClassCorpora, WorkloadMix, WorkloadSpec
    from capacity_plugins.scenario import Scenario
    from capacity_plugins.sinks.records import RecordsSink
    from capacity_plugins.swarm.membership import SwarmMembership
    from capacity_plugins.telemetry.collector import TelemetryCollector

log = logging.getLogger(__name__)

StepProvider = Callable[[float], tuple[int | None, bool]]
# The running step for live views: {"step", "of", "level", "unit", "target_rps", "phase"}.
StepInfo = Callable[[], "dict[str, Any] | None"]
Role = Literal["local", "master", "worker"]


def no_step(now_unix: float) -> tuple[int | None, bool]:
    return None, False


@dataclass(eq=False)
class RunContext:
    options: LLMOptions
    dialect: Dialect
    params: RequestParams
    results_dir: Path
    role: Role = "local"
    # The rehearsal this run follows (`--scenario`); None for a plain -u/-r/-t run.
    scenario: Scenario | None = None
    llm_stats: LLMStats = field(default_factory=LLMStats)
    corpus: Corpus | None = None  # None until loaded (a worker loads it at the master's setup)
    sampler: Sampler | None = None  # this process's shard of the corpus
    # The scenario's workload classes (rehearsal/workloads.py): which class each request is, with its
    # own prompts and settings; None = every request from `sampler` with `params`.
    workloads: WorkloadMix | None = None
    class_corpora: ClassCorpora | None = None
    # The master's / local runner's classes as sent in Setup (with their corpus hashes).
    workload_specs: list[WorkloadSpec] = field(default_factory=list)
    sink: RecordsSink | None = None
    worker_index: int = 0
    worker_count: int = 1
    step_provider: StepProvider = no_step
    # may_send(now_unix): False while a step drains (its window closed; in-flight requests finish).
    may_send: Callable[[float], bool] = lambda now_unix: True
    pacer: Pacer | None = None
    # Trace replay: tokens per hash_ids block of the requests the pacer hands out (corpus/trace.py).
    trace_block_tokens: int = 512
    # Multi-turn trace replay: this process's conversations (client/sessions.py); off by default.
    trace_sessions: bool = False
    sessions: SessionStore = field(default_factory=SessionStore)
    extra_meta: dict[str, Any] = field(default_factory=dict)
    # The telemetry collector (master/local, when the scenario scrapes endpoints or NVML): its
    # .latest() feeds the web UI tab and the live exporter. None when telemetry is off.
    telemetry: TelemetryCollector | None = None
    step_info: StepInfo | None = None
    request_name: str = ""
    # The --tokenizer, loaded once per process; None without one.
    tokenizer: Tokenizer | None = None
    tokenizer_path: str | None = None
    # The target as given, credentials included (environment.host shows it without them).
    target_url: str | None = field(default=None, repr=False)
    # Built from --api-key-env (or the target URL's user:password) at startup; kept out of repr
    # so it never lands in a log line.
    auth_headers: dict[str, str] = field(default_factory=dict, repr=False)
    # Every secret value of the run: scrubbed from whatever it writes (records, meta, reports).
    secrets: Secrets = field(default_factory=Secrets, repr=False)
    # The master's view of its workers (None elsewhere): lost / joined workers invalidate steps.
    membership: SwarmMembership | None = None
    # Connection failures pause the whole process (client/backoff.py).
    backoff: Backoff = field(default_factory=Backoff)
    # Which output-token count is exact for this server, when it reports none (client/tokens.py).
    token_evidence: TokenCountEvidence = field(default_factory=TokenCountEvidence)
    # step → [stream reads that brought output, reads that brought more than one output event]
    read_counts: dict[int, list[int]] = field(default_factory=dict)
    # A cache probe's cache arm (rehearsal/cache_arm.py): its next prompt while a cache-arm step runs,
    # else None (the corpus's prompt is sent).
    cache_arm: Callable[[float], Any] | None = None

    @classmethod
    def from_options(cls, options: LLMOptions, *, role: Role = "local", results_dir: Path | None = None,
                     target_url: str | None = None) -> RunContext:
        ctx = cls(
            options=options,
            dialect=get_dialect(options.dialect, options.triton),
            params=RequestParams(),
            results_dir=results_dir or options.results_dir or Path("results"),
            role=role,
        )
        ctx.reconfigure(options, target_url=target_url)
        return ctx

    def reconfigure(self, options: LLMOptions, *, target_url: str | None = None) -> None:
        """Apply (new) options in place: a worker learns the master's options only when the test
        starts, and users hold a reference to this object."""
        self.options = options
        self.dialect = get_dialect(options.dialect, options.triton)
        self.params = RequestParams(
            model=options.model,
            max_tokens=options.max_tokens,
            temperature=options.temperature,
            top_p=options.top_p,
            stream=options.stream,
            include_usage=options.usage,
            ignore_eos=options.ignore_eos,
        )
        self.request_name = options.dialect
        if options.tokenizer != self.tokenizer_path:  # a worker reconfigures with the same path: keep it
            self.tokenizer = load_tokenizer(options.tokenizer) if options.tokenizer else None
            self.tokenizer_path = options.tokenizer
        if target_url is not None:
            self.target_url = target_url
        key = options.api_key()
        basic = basic_auth(self.target_url)
        # The API key wins over credentials in the URL (docs/secrets.md).
        self.auth_headers = {"Authorization": f"Bearer {key}" if key else str(basic)} if key or basic else {}
        self.secrets = options.secrets(self.target_url)

    def count_tokens(self, text: str) -> int:
        """Tokens of generated text by the local tokenizer (no BOS/EOS added)."""
        assert self.tokenizer is not None
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def request_headers(self, call_headers: dict[str, str]) -> dict[str, str]:
        """Headers for one call: dialect's, then user extras, then auth; identity encoding
        because the body is read raw, line by line (a gzip-ing proxy would break parsing)."""
        headers = dict(call_headers)
        headers.update(self.options.headers)
        headers.update(self.auth_headers)
        headers["Accept-Encoding"] = "identity"
        return headers

    def ensure_pacer(self) -> Pacer:
        """This process's pacer (open loop), created once; it drops arrivals during a backoff."""
        if self.pacer is None:
            self.pacer = Pacer(paused_until=lambda: self.backoff.until)
        return self.pacer

    def count_reads(self, step: int, reads: int, backlog_reads: int) -> None:
        counts = self.read_counts.get(step)
        if counts is None:
            counts = self.read_counts[step] = [0, 0]
        counts[0] += reads
        counts[1] += backlog_reads

    def next_sample(self) -> Any:  # a corpus Sample, or None before this worker has its shard
        if self.sampler is None:
            return None
        if self.cache_arm is not None:
            sample = self.cache_arm(time.time())
            if sample is not None:
                return sample
        return self.sampler.next()

    def next_request(self, now_unix: float) -> tuple[Any, WorkloadLane | None]:
        """The next sample, and the workload class it was drawn for (None without classes)."""
        if self.workloads is None:
            return self.next_sample(), None
        return self.workloads.next(self.step_provider(now_unix)[0])


def load_tokenizer(path: str) -> Tokenizer:
    """A Hugging Face tokenizer.json; UserError naming the file when it is missing or unreadable."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"--tokenizer: {path}: no such file")
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(p))
    except Exception as e:  # tokenizers raises a bare Exception on bad JSON / unknown models
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else e.__class__.__name__
        raise UserError(f"--tokenizer: {path}: not a Hugging Face tokenizer.json ({first})") from None


def get_context(environment: Any) -> RunContext:
    ctx = getattr(environment, "capacity", None)
    if not isinstance(ctx, RunContext):
        raise RuntimeError("capacity plugin not registered on this environment (capacity_plugins.install)")
    return ctx
