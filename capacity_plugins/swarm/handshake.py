"""The master tells its workers how to run; a worker that cannot, says so and the run stops.

At every test start the master sends `Setup`: its resolved `LLMOptions`, the sha256 of its corpus
and the shard count. A worker applies the options, loads its own copy of the corpus and refuses
(`Refuse`, exit 2 for the whole swarm) when the hash differs — prompts must be the same
everywhere, or the shards are not disjoint and the results mean nothing. Then it takes shard
`worker_index` of `shard_count`. The scenario's workload classes travel in the same message (each
with its corpus hash, checked the same way), so every worker draws classes as the master says.
Workers need no scenario file of their own.
"""

from __future__ import annotations

import base64
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import gevent

from capacity_plugins.client.context import RunContext
from capacity_plugins.contracts.options import LLMOptions
from capacity_plugins.contracts.redaction import basic_auth
from capacity_plugins.errors import UserError
from capacity_plugins.swarm import messages

if TYPE_CHECKING:
    from locust.env import Environment

    from capacity_plugins.corpus import Corpus

log = logging.getLogger(__name__)
T = TypeVar("T")


def _with_credentials(host: str, basic: str) -> str:
    """The master's target URL again, user:password included (they came as a Basic value)."""
    user_pass = base64.b64decode(basic.removeprefix("Basic ")).decode()
    scheme, sep, rest = host.partition("://")
    return f"{scheme}{sep}{quote(user_pass, safe=':')}@{rest}" if sep else host


def load_corpus(options: LLMOptions) -> Corpus:
    """The corpus, read in a thread of gevent's pool: a read takes seconds on a busy host, and a
    Locust process whose hub is held that long sends no heartbeats — a worker loading at start-up,
    just after its master started the test, was marked lost (both workers at once, every other
    run with two CPU burners). The GIL still passes to the hub between bytecodes."""
    from capacity_plugins.corpus import load_corpus as _load

    return in_thread(_load, options.corpus, min_distinct=options.min_distinct)


def in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` in a thread of gevent's pool, its exception raised here. Caught in the
    thread and handed back: an exception leaving a pool thread is printed as a traceback by gevent
    first, and a bad corpus must stay one line (exit 2)."""

    def run() -> tuple[T | None, BaseException | None]:
        try:
            return fn(*args, **kwargs), None
        except Exception as e:  # re-raised in the caller, below
            return None, e

    result, error = gevent.get_hub().threadpool.apply(run)
    if error is not None:
        raise error
    return result  # fn returned it (threadpool.apply is untyped)


class MasterHandshake:
    def __init__(self, environment: Environment, ctx: RunContext) -> None:
        self.env = environment
        self.ctx = ctx
        self.runner: Any = environment.runner
        self.refusals: list[str] = []
        self.workers_seen: set[int] = set()
        self.ready_workers: set[int] = set()
        self.started = False  # a test has started: a worker that says Hello needs the setup
        # The rehearsal is open loop: workers create their pacer before any user starts.
        self.open_loop = bool(ctx.scenario is not None and ctx.scenario.open_loop)

    def attach(self) -> None:
        messages.on(self.runner, messages.Refuse, self._on_refuse)
        messages.on(self.runner, messages.Ready, lambda m: self.ready_workers.add(m.worker))
        messages.on(self.runner, messages.Hello, self._on_hello)

    def _on_hello(self, m: messages.Hello) -> None:
        # A worker that joins mid-test has no options yet: everyone gets the setup again with the
        # new shard count (shards stay disjoint); the step it joined in is invalid anyway. Before
        # the first test there is nothing to send: test start sends everyone the setup.
        if self.started:
            log.info("capacity: worker %s joined a running test: sending the setup again", m.worker)
            self.send_setup()

    def all_ready(self) -> bool:
        """Every connected worker applied this test's setup."""
        connected = {self.runner.get_worker_index(c.id) for c in self.runner.clients.all if c.state != "missing"}
        return bool(connected) and connected <= self.ready_workers

    def send_setup(self) -> None:
        """At test start: every connected worker gets the options, corpus hash and shard count."""
        runner, ctx = self.runner, self.ctx
        assert ctx.corpus is not None
        self.started = True
        indices = [runner.get_worker_index(c.id) for c in runner.clients.all]
        shard_count = max([runner.worker_count, *[i + 1 for i in indices]])
        ctx.worker_count = shard_count
        self.workers_seen.update(indices)
        self.ready_workers.clear()
        messages.send(runner, messages.Setup(options=ctx.options, sha256=ctx.corpus.sha256,
                                             shard_count=shard_count, open_loop=self.open_loop,
                                             basic_auth=basic_auth(ctx.target_url),
                                             workloads=[s.to_message() for s in ctx.workload_specs]))

    def _on_refuse(self, m: messages.Refuse) -> None:
        self.refusals.append(m.reason)
        sys.stderr.write(f"capacity: a worker refused to run: {m.reason}\n")
        self.env.process_exit_code = 2
        gevent.spawn(self.runner.quit)


class WorkerHandshake:
    def __init__(self, environment: Environment, ctx: RunContext,
                 apply_workloads: Callable[[RunContext, list[dict[str, Any]]], None]) -> None:
        self.env = environment
        self.ctx = ctx
        # The rehearsal's (rehearsal/workloads.py apply_setup): this worker's mix from the classes the
        # master sent; UserError when a class's corpus is bad here.
        self.apply_workloads = apply_workloads
        self.runner: Any = environment.runner
        # A worker started with the scenario (capacity run --worker, --processes) loads its corpus
        # at start-up, so a test's setup only has to check it (a load can take seconds).
        self._corpus_source: str | None = ctx.options.corpus if ctx.corpus is not None else None

    def attach(self) -> None:
        messages.on(self.runner, messages.Setup, self._on_setup)
        messages.send(self.runner, messages.Hello(worker=self.ctx.worker_index))

    def _on_setup(self, m: messages.Setup) -> None:
        ctx = self.ctx
        try:
            options = m.options
            if m.basic_auth and ctx.target_url is None:
                ctx.target_url = _with_credentials(self.env.host or "", m.basic_auth)
            ctx.reconfigure(options)
            if ctx.corpus is None or self._corpus_source != options.corpus:
                ctx.corpus = load_corpus(options)
                self._corpus_source = options.corpus
        except UserError as e:
            self._refuse(f"worker {ctx.worker_index}: {e}")
            return
        if ctx.corpus.sha256 != m.sha256:
            self._refuse(
                f"worker {ctx.worker_index}: corpus {options.corpus!r} has sha256 {ctx.corpus.sha256[:12]}… "
                f"but the master's has {m.sha256[:12]}…; copy the master's corpus file to this host"
            )
            return
        ctx.worker_count = m.shard_count
        try:
            self.apply_workloads(ctx, m.workloads)
        except UserError as e:
            self._refuse(f"worker {ctx.worker_index}: {e}")
            return
        ctx.sampler = ctx.corpus.sampler(options.sampling, options.seed, ctx.worker_index, ctx.worker_count)
        if m.open_loop:
            ctx.ensure_pacer()  # users wait for arrivals from the first one they see
        messages.send(self.runner, messages.Ready(worker=ctx.worker_index))

    def _refuse(self, reason: str) -> None:
        log.error("capacity: refusing to run: %s", reason)
        self.ctx.sampler = None
        self.ctx.workloads = None
        messages.send(self.runner, messages.Refuse(reason=reason))
