"""The messages between the master and its workers: one dataclass per message, one type name each.

Locust carries custom messages as `(type, data)` with msgpack-safe data. Each class here owns its
type name (`TYPE`) and its conversion (`to_data` / `from_data`), so a listener receives a typed
object, never a dict told apart by flag keys. `send()` / `on()` are the only two functions that
touch the runner's message API. What a role above the swarm owns travels in that role's message
form — the options, the workload classes, the rehearsal's steps (`Step.to_message()`) and arrival
plans — and that role reads it back: the swarm imports none of them.

| message | direction | when |
|---|---|---|
| `Setup` | master → workers | test start: the master's options, corpus hash, shard count, workload classes |
| `Hello` | worker → master | the worker's handlers are attached: a test already running sends it the `Setup` |
| `Ready` | worker → master | the worker applied a `Setup` and can send |
| `Refuse` | worker → master | the worker cannot run as told (corpus differs, bad options) |
| `StepStarted` | master → workers | a step starts (with its open-loop arrival plan and shards) |
| `StepUpdated` | master → workers | a step's window closed or its drain ended (new boundaries) |
| `StepsFinished` | master → workers | the last step drained: the rehearsal is complete |
| `StepsReset` | master → workers | a new test from the web UI: forget the old timeline |
| `Watch` | worker → master | ≥ 1 Hz: CPU, loop lag, read backlog, requests in flight, pacer counters |
| `RecordsBatch` | worker → master | ≥ 1 Hz and at stop: finished request records |
| `ClockPing` | master → workers | at a worker's Hello / Ready, then every CLOCK_INTERVAL_S: the master's send time |
| `ClockPong` | worker → master | at once: the ping's time, the worker's receive and send times (its own clock) |
| `ClockOffsets` | master → workers | after each measurement: every worker's offset to the master's clock |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, TypeVar

from capacity_plugins.contracts.options import LLMOptions


@dataclass
class Setup:
    TYPE: ClassVar[str] = "capacity_setup"
    options: LLMOptions  # the master's, typed: a worker runs with exactly these
    sha256: str  # the master's corpus hash: a worker with another corpus refuses
    shard_count: int
    open_loop: bool = False  # the rehearsal's users wait for scheduled arrivals (a pacer)
    # Basic credentials from the target URL's user:password (the host workers get has none).
    # Only between the processes of one swarm; never written anywhere.
    basic_auth: str | None = field(default=None, repr=False)
    # The scenario's workload classes (rehearsal/workloads.py WorkloadSpec.to_message); empty: none.
    workloads: list[dict[str, Any]] = field(default_factory=list)
    # An agentic load's session scripts (corpus/agentic.py SessionScript.to_message); empty: none.
    sessions: list[dict[str, Any]] = field(default_factory=list)

    def to_data(self) -> dict[str, Any]:
        return {**asdict(self), "options": self.options.to_message()}

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> Setup:
        return cls(options=LLMOptions.from_message(d["options"]), sha256=str(d["sha256"]), shard_count=int(d["shard_count"]),
                   open_loop=bool(d.get("open_loop")), basic_auth=d.get("basic_auth"),
                   workloads=[dict(w) for w in d.get("workloads") or ()],
                   sessions=[dict(s) for s in d.get("sessions") or ()])


@dataclass
class Hello:
    # Locust announces a worker (client_ready) before the worker's init listeners run, so a
    # `Setup` sent on that news can arrive before the handler exists and be dropped ("Unknown
    # message type"). Hello comes from the handler's side once it is there.
    TYPE: ClassVar[str] = "capacity_hello"
    worker: int

    def to_data(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> Hello:
        return cls(worker=int(d["worker"]))


@dataclass
class Ready:
    TYPE: ClassVar[str] = "capacity_ready"
    worker: int

    def to_data(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> Ready:
        return cls(worker=int(d["worker"]))


@dataclass
class Refuse:
    TYPE: ClassVar[str] = "capacity_refuse"
    reason: str

    def to_data(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> Refuse:
        return cls(reason=str(d.get("reason")))


@dataclass
class StepStarted:
    TYPE: ClassVar[str] = "capacity_step_started"
    step: dict[str, Any]  # rehearsal/steps.py Step.to_message()
    plan: dict[str, Any] | None  # open loop: the global schedule's parameters (rehearsal/arrivals.py ArrivalPlan)
    shards: dict[int, int]  # worker index → its shard of the schedule
    shard_count: int

    def to_data(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "plan": self.plan,
            "shards": {str(w): k for w, k in self.shards.items()},  # msgpack map keys: strings
            "shard_count": self.shard_count,
        }

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> StepStarted:
        plan = d.get("plan")
        return cls(
            step=dict(d["step"]),
            plan=dict(plan) if plan else None,
            shards={int(w): int(k) for w, k in (d.get("shards") or {}).items()},
            shard_count=int(d.get("shard_count") or 1),
        )


@dataclass
class StepUpdated:
    TYPE: ClassVar[str] = "capacity_step_updated"
    step: dict[str, Any]  # rehearsal/steps.py Step.to_message()

    def to_data(self) -> dict[str, Any]:
        return {"step": self.step}

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> StepUpdated:
        return cls(step=dict(d["step"]))


@dataclass
class StepsFinished:
    TYPE: ClassVar[str] = "capacity_steps_finished"

    def to_data(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> StepsFinished:
        return cls()


@dataclass
class StepsReset:
    TYPE: ClassVar[str] = "capacity_steps_reset"

    def to_data(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> StepsReset:
        return cls()


@dataclass
class Watch:
    """What a generator process reports about itself (see rehearsal/watch.py)."""

    TYPE: ClassVar[str] = "capacity_watch"
    worker: int
    host: str
    unix: float
    in_flight: int
    # (unix, cpu %, RSS bytes or None) samples since the last report
    cpu: list[tuple[float, float, float | None]] = field(default_factory=list)
    # (unix, event-loop lag ms) samples since the last report
    loop_lag: list[tuple[float, float]] = field(default_factory=list)
    # step index → cumulative counters of that step so far (pacer, reads)
    steps: dict[int, dict[str, Any]] = field(default_factory=dict)

    def to_data(self) -> dict[str, Any]:
        return {
            "worker": self.worker, "host": self.host, "unix": self.unix, "in_flight": self.in_flight,
            "cpu": [list(s) for s in self.cpu], "loop_lag": [list(s) for s in self.loop_lag],
            "steps": {str(k): v for k, v in self.steps.items()},
        }

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> Watch:
        return cls(
            worker=int(d["worker"]),
            host=str(d.get("host") or f"worker-{d['worker']}"),
            unix=float(d["unix"]),
            in_flight=int(d.get("in_flight") or 0),
            cpu=[(float(u), float(c), None if r is None else float(r)) for u, c, r in d.get("cpu") or ()],
            loop_lag=[(float(u), float(v)) for u, v in d.get("loop_lag") or ()],
            steps={int(k): dict(v) for k, v in (d.get("steps") or {}).items()},
        )


@dataclass
class RecordsBatch:
    TYPE: ClassVar[str] = "capacity_records"
    worker: int
    # The records as requests.jsonl lines, a few records to a piece (RecordsSink.take_batch): made
    # by the worker's writer thread, so the hub only hands bytes to msgpack. As dicts, Locust's
    # msgpack took 8-11 ms in one piece for a second's 1 000 streamed records, on the hub.
    lines: list[bytes]
    produced: int  # records this worker has made so far (what it owes the master)
    final: bool  # the worker stopped: nothing more follows

    def to_data(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> RecordsBatch:
        return cls(worker=int(d.get("worker", -1)), lines=[bytes(x) for x in d.get("lines") or ()],
                   produced=int(d.get("produced") or 0), final=bool(d.get("final")))


@dataclass
class ClockPing:
    TYPE: ClassVar[str] = "capacity_clock_ping"
    seq: int
    t0: float  # the master's wall clock when it sent this

    def to_data(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> ClockPing:
        return cls(seq=int(d["seq"]), t0=float(d["t0"]))


@dataclass
class ClockPong:
    TYPE: ClassVar[str] = "capacity_clock_pong"
    worker: int
    seq: int
    t0: float  # the ping's
    t1: float  # the worker's own wall clock (uncorrected) when the ping arrived
    t2: float  # ... and when it sent this
    # The worker's shipping mark (swarm/shipping.py): every record batch it sent before this pong
    # has reached the master once the master acknowledges this mark (ClockOffsets.marks).
    mark: int = 0

    def to_data(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> ClockPong:
        return cls(worker=int(d["worker"]), seq=int(d["seq"]), t0=float(d["t0"]), t1=float(d["t1"]), t2=float(d["t2"]),
                   mark=int(d.get("mark") or 0))


@dataclass
class ClockOffsets:
    TYPE: ClassVar[str] = "capacity_clock_offsets"
    offsets: dict[int, float]  # worker index → its clock minus the master's, seconds
    marks: dict[int, int] = field(default_factory=dict)  # worker index → the last shipping mark received

    def to_data(self) -> dict[str, Any]:
        # msgpack map keys: strings
        return {"offsets": {str(w): o for w, o in self.offsets.items()}, "marks": {str(w): m for w, m in self.marks.items()}}

    @classmethod
    def from_data(cls, d: dict[str, Any]) -> ClockOffsets:
        return cls(offsets={int(w): float(o) for w, o in (d.get("offsets") or {}).items()},
                   marks={int(w): int(m) for w, m in (d.get("marks") or {}).items()})


M = TypeVar("M", Setup, Hello, Ready, Refuse, StepStarted, StepUpdated, StepsFinished, StepsReset, Watch, RecordsBatch,
            ClockPing, ClockPong, ClockOffsets)


def send(runner: Any, message: Any, client_id: str | None = None) -> None:
    """Send a typed message (master: to every worker, or one `client_id`; worker: to the master)."""
    runner.send_message(message.TYPE, message.to_data(), client_id)


def on(runner: Any, cls: type[M], handler: Callable[[M], None]) -> None:
    """Register `handler` for messages of `cls` (it receives the decoded object)."""

    def receive(environment: Any = None, msg: Any = None, **_: Any) -> None:
        handler(cls.from_data(msg.data))

    runner.register_message(cls.TYPE, receive)
