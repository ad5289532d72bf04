"""The master tells its workers how to run; a worker that cannot, says so and the run stops.

At every test start the master sends `Setup`: its resolved `LLMOptions`, the sha256 of its corpus
and the shard count. A worker configures its client with the options, its request source loads
its own copy of the corpus (rehearsal/source.py, through `SwarmSource`), and it refuses
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
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import quote

import gevent

from capacity_plugins.contracts.options import LLMOptions
from capacity_plugins.contracts.redaction import basic_auth
from capacity_plugins.errors import UserError
from capacity_plugins.swarm import messages

if TYPE_CHECKING:
    from locust.env import Environment

    from capacity_plugins.client.client import LLMClient
    from capacity_plugins.corpus import Corpus
    from capacity_plugins.swarm.clock import MasterClock

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


class SwarmSource(Protocol):
    """What the handshake asks of the rehearsal's request source (rehearsal/source.py
    `RequestSource`; the swarm sits below the rehearsal and only knows this much of it)."""

    worker_index: int
    worker_count: int
    session_messages: list[dict[str, Any]]  # an agentic load's session scripts, for `Setup`

    def setup_parts(self) -> tuple[str, list[dict[str, Any]]]:
        """The master's: its corpus hash and its workload classes (as messages) for `Setup`."""
        ...

    def take_setup(self, setup: messages.Setup) -> None:
        """A worker's: the master's corpus (checked against its hash), this worker's shard, the
        classes, the pacer. UserError (one line) when it cannot."""
        ...

    def drop_shard(self) -> None:
        """A worker's: it refused, so its users take nothing until the next setup."""
        ...


class MasterHandshake:
    def __init__(self, environment: Environment, client: LLMClient, source: SwarmSource, open_loop: bool) -> None:
        self.env = environment
        self.client = client  # the options every worker runs with, and the target's credentials
        self.source = source  # the corpus and workload classes every worker must match
        self.runner: Any = environment.runner
        self.refusals: list[str] = []
        self.workers_seen: set[int] = set()
        self.ready_workers: set[int] = set()
        self.started = False  # a test has started: a worker that says Hello needs the setup
        # The rehearsal is open loop: workers create their pacer before any user starts.
        self.open_loop = open_loop
        # The workers' clock offsets (swarm/clock.py): measured at Hello and Ready, and a worker is
        # ready for a step only once its offset is known.
        self.clock: MasterClock | None = None

    def attach(self) -> None:
        messages.on(self.runner, messages.Refuse, self._on_refuse)
        messages.on(self.runner, messages.Ready, self._on_ready)
        messages.on(self.runner, messages.Hello, self._on_hello)

    def _on_ready(self, m: messages.Ready) -> None:
        self.ready_workers.add(m.worker)
        if self.clock is not None:
            self.clock.ping()

    def _on_hello(self, m: messages.Hello) -> None:
        if self.clock is not None:
            self.clock.ping()
        # A worker that joins mid-test has no options yet: everyone gets the setup again with the
        # new shard count (shards stay disjoint); the step it joined in is invalid anyway. Before
        # the first test there is nothing to send: test start sends everyone the setup.
        if self.started:
            log.info("capacity: worker %s joined a running test: sending the setup again", m.worker)
            self.send_setup()

    def all_ready(self) -> bool:
        """Every connected worker applied this test's setup."""
        connected = {self.runner.get_worker_index(c.id) for c in self.runner.clients.all if c.state != "missing"}
        clock_known = self.clock is None or self.clock.known(connected)
        return bool(connected) and connected <= self.ready_workers and clock_known

    def send_setup(self) -> None:
        """At test start: every connected worker gets the options, corpus hash and shard count."""
        runner, source = self.runner, self.source
        self.started = True
        indices = [runner.get_worker_index(c.id) for c in runner.clients.all]
        shard_count = max([runner.worker_count, *[i + 1 for i in indices]])
        source.worker_count = shard_count
        self.workers_seen.update(indices)
        self.ready_workers.clear()
        sha256, workloads = source.setup_parts()
        messages.send(runner, messages.Setup(options=self.client.options, sha256=sha256,
                                             shard_count=shard_count, open_loop=self.open_loop,
                                             basic_auth=basic_auth(self.client.target_url),
                                             workloads=workloads, sessions=source.session_messages))

    def _on_refuse(self, m: messages.Refuse) -> None:
        self.refusals.append(m.reason)
        sys.stderr.write(f"capacity: a worker refused to run: {m.reason}\n")
        self.env.process_exit_code = 2
        gevent.spawn(self.runner.quit)


class WorkerHandshake:
    def __init__(self, environment: Environment, client: LLMClient, source: SwarmSource) -> None:
        self.env = environment
        self.client = client  # configured with the master's options at each setup
        self.source = source  # takes the master's corpus (checked) and this worker's shard
        self.runner: Any = environment.runner

    def attach(self) -> None:
        messages.on(self.runner, messages.Setup, self._on_setup)
        messages.send(self.runner, messages.Hello(worker=self.source.worker_index))

    def _on_setup(self, m: messages.Setup) -> None:
        worker = self.source.worker_index
        try:
            target_url = None
            if m.basic_auth and self.client.target_url is None:
                target_url = _with_credentials(self.env.host or "", m.basic_auth)
            self.client.configure(m.options, target_url=target_url)
            self.source.take_setup(m)
        except UserError as e:
            self._refuse(f"worker {worker}: {e}")
            return
        messages.send(self.runner, messages.Ready(worker=worker))

    def _refuse(self, reason: str) -> None:
        log.error("capacity: refusing to run: %s", reason)
        self.source.drop_shard()
        messages.send(self.runner, messages.Refuse(reason=reason))
