"""What this process's users send next, and when: one `RequestSource` per Locust process.

Built by `plugin.register()` and attached as `environment.capacity_source`
(`RequestSource.of(environment)`):

- which prompt: this process's shard of the corpus (`sampler`), the workload classes' seeded draw
  when the scenario has classes (`workloads`, rehearsal/workloads.py), a cache probe's cache arm
  while a cache-arm step runs (`cache_arm`, rehearsal/cache_arm.py);
- when: the step timeline every record is tagged with (`step_at`), whether a request may start
  (`may_send`: not while a step drains), and in open loop the pacer that hands out arrivals;
- a trace replay's requests' block size and, with multi-turn sessions, the conversations.

Who fills it: the run's start (local runner) or the master's setup (a worker: `take_setup`, through
the swarm's handshake) gives it the corpus and its shard; the generator side
(rehearsal/generator.py) keeps the timeline and the pacer going as steps start and end. On the
master it holds what the workers must match: the corpus and the workload classes as sent in
`Setup` (`setup_parts`). Users only read it.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from capacity_plugins.client.sessions import SessionStore
from capacity_plugins.contracts.clock import master_time
from capacity_plugins.errors import UserError
from capacity_plugins.rehearsal import workloads as workloads_mod
from capacity_plugins.rehearsal.cache_arm import CacheArmSource
from capacity_plugins.rehearsal.steps import RECORD_EARLY_S, StepTimeline
from capacity_plugins.swarm.handshake import load_corpus

if TYPE_CHECKING:
    from capacity_plugins.client.client import LLMClient
    from capacity_plugins.client.lane import WorkloadLane
    from capacity_plugins.client.pacer import Pacer
    from capacity_plugins.contracts.options import LLMOptions
    from capacity_plugins.corpus import Corpus, Sampler
    from capacity_plugins.rehearsal.workloads import ClassCorpora, WorkloadMix, WorkloadSpec
    from capacity_plugins.swarm.messages import Setup

ATTRIBUTE = "capacity_source"  # where register() attaches it on the Locust environment


class RequestSource:
    def __init__(self, client: LLMClient, *, worker_index: int = 0) -> None:
        # The client's backoff (the pacer drops arrivals while it holds) and its request parameters
        # (every workload class's defaults).
        self.client = client
        self.worker_index = worker_index  # this process's shard (a worker's index; 0 elsewhere)
        self.worker_count = 1  # shards in the swarm
        self.corpus: Corpus | None = None  # None until loaded (a worker without a scenario: at the setup)
        self._corpus_spec: tuple[str, int] | None = None  # (corpus, min_distinct) it was loaded as
        self.sampler: Sampler | None = None  # None until this process has its shard
        # The scenario's workload classes: which class each request is, with its own prompts and
        # settings; None = every request from `sampler` with the client's parameters.
        self.workloads: WorkloadMix | None = None
        self.class_corpora: ClassCorpora | None = None
        # The master's / local runner's classes as sent in Setup (with their corpus hashes).
        self.workload_specs: list[WorkloadSpec] = []
        self.timeline = StepTimeline()  # empty outside a rehearsal: no step, never draining
        self.pacer: Pacer | None = None  # None = closed loop
        # Trace replay: tokens per hash_ids block of the requests the pacer hands out (corpus/trace.py).
        self.trace_block_tokens = 512
        # Multi-turn trace replay: this process's conversations (client/sessions.py); off by default.
        self.trace_sessions = False
        self.sessions = SessionStore()
        # An agentic load: the session scripts as messages (the master sends them in Setup) and this
        # process's deck of them, which its users walk one whole session at a time; None otherwise.
        self.session_messages: list[dict[str, Any]] = []
        self.agentic: AgenticDeck | None = None
        self.cache_arm = CacheArmSource(self, lambda: self.timeline)

    @classmethod
    def of(cls, environment: Any) -> RequestSource:
        found = getattr(environment, ATTRIBUTE, None)
        if not isinstance(found, cls):
            raise RuntimeError("capacity plugin not registered on this environment (capacity_plugins.install)")
        return found

    def attach(self, environment: Any) -> None:
        setattr(environment, ATTRIBUTE, self)

    # -- when ---------------------------------------------------------------------------------------------

    def step_at(self, now_unix: float) -> tuple[int | None, bool]:
        """(step index | None, in its warmup or drain) at `now_unix`: stamped on every record at send."""
        return self.timeline.lookup(now_unix, RECORD_EARLY_S)

    def may_send(self, now_unix: float) -> bool:
        """False while a step drains (its window closed; in-flight requests finish)."""
        return not self.timeline.in_drain(now_unix)

    def ensure_pacer(self) -> Pacer:
        """This process's pacer (open loop), created once; it drops arrivals during a backoff."""
        if self.pacer is None:
            from capacity_plugins.client.pacer import Pacer

            backoff = self.client.backoff
            self.pacer = Pacer(paused_until=lambda: backoff.until)
        return self.pacer

    # -- the corpus and this process's shard ----------------------------------------------------------------

    def load(self, options: LLMOptions) -> None:
        """The run's corpus, read again only when the options name another (UserError when bad)."""
        spec = (options.corpus, options.min_distinct)
        if self.corpus is None or spec != self._corpus_spec:
            self.corpus = load_corpus(options)
            self._corpus_spec = spec

    def prepare_classes(self, scenario: Any, options: LLMOptions) -> None:
        """The master's / local runner's workload classes with their corpus hashes (rehearsal/workloads.py)."""
        workloads_mod.prepare(self, scenario, options)

    def take_shard(self, options: LLMOptions, specs: list[WorkloadSpec]) -> None:
        """This process's shard (`worker_index` of `worker_count`) of the corpus and of the classes."""
        assert self.corpus is not None
        workloads_mod.apply(self, specs, options, self.client.params)
        self.sampler = self.corpus.sampler(options.sampling, options.seed, self.worker_index, self.worker_count)

    def prepare_sessions(self, scenario: Any) -> None:
        """An agentic load's session scripts (read from the scenario's file: the runner checked it)."""
        messages = scenario.load.agentic_sessions(scenario) if scenario is not None else None
        self.take_sessions(messages or [])

    def take_sessions(self, messages: list[dict[str, Any]]) -> None:
        self.session_messages = list(messages)
        self.agentic = AgenticDeck(messages, self) if messages else None

    def setup_parts(self) -> tuple[str, list[dict[str, Any]]]:
        """What every worker must match (swarm/handshake.py): the corpus hash, the classes as messages."""
        assert self.corpus is not None
        return self.corpus.sha256, [s.to_message() for s in self.workload_specs]

    def take_setup(self, setup: Setup) -> None:
        """A worker: the master's corpus (its own copy, checked against the master's hash), its
        shard, the classes, the pacer (open loop). UserError (one line) when it cannot."""
        options = setup.options
        self.load(options)
        assert self.corpus is not None
        if self.corpus.sha256 != setup.sha256:
            raise UserError(f"corpus {options.corpus!r} has sha256 {self.corpus.sha256[:12]}… but the master's has "
                            f"{setup.sha256[:12]}…; copy the master's corpus file to this host")
        self.worker_count = setup.shard_count
        self.take_shard(options, [workloads_mod.WorkloadSpec.from_message(w) for w in setup.workloads])
        self.take_sessions(setup.sessions)
        if setup.open_loop:
            self.ensure_pacer()  # users wait for arrivals from the first one they see

    def drop_shard(self) -> None:
        """A worker that refused the setup sends nothing until the next one."""
        self.sampler = None
        self.workloads = None

    # -- which prompt ---------------------------------------------------------------------------------------

    def next_sample(self) -> Any:  # a corpus Sample, or None before this process has its shard
        if self.sampler is None:
            return None
        sample = self.cache_arm(master_time())
        if sample is not None:
            return sample
        return self.sampler.next()

    def next_request(self, now_unix: float) -> tuple[Any, WorkloadLane | None]:
        """The next sample, and the workload class it was drawn for (None without classes)."""
        if self.workloads is None:
            return self.next_sample(), None
        return self.workloads.next(self.step_at(now_unix)[0])


class AgenticDeck:
    """This process's share of an agentic load's session scripts, dealt round-robin to its users.

    Process k of n takes scripts k, k+n, … (all of them when there are fewer scripts than
    processes); each deal is a new run of a script with its own id (`<session_id>@<process>.<n>`)
    and its own seeded draw of the tools' latencies."""

    def __init__(self, messages: list[dict[str, Any]], source: RequestSource) -> None:
        from capacity_plugins.corpus.agentic import SessionScript

        self._all = [SessionScript.from_message(m) for m in messages]
        self._source = source
        self._dealt = 0

    def next(self) -> tuple[Any, str, random.Random]:
        k, n = self._source.worker_index, max(1, self._source.worker_count)
        mine = self._all[k::n] if len(self._all) >= n else self._all
        script = mine[self._dealt % len(mine)]
        run_id = f"{script.session_id}@{k}.{self._dealt}"
        self._dealt += 1
        return script, run_id, random.Random(run_id)
