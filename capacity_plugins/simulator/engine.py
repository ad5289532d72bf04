"""The continuous-batching engine: one scheduler loop shared by every dialect.

Like vLLM's scheduler, in a loop of steps:
- between steps, finished and aborted requests leave the batch and waiting requests join it
  (FIFO) while there is a free slot (`max_num_seqs`) and KV budget (`kv_cache_tokens`: prompt +
  generated tokens of running requests; a request joins only if its tokens + 1 fit);
- a step lasts `decode_base_ms + decode_per_seq_ms × running` plus, for the requests that joined
  in it, their (uncached) prompt tokens / `prefill_tokens_per_s`; so a larger batch makes every
  request slower, and a prefill stalls the decode of everyone else for its duration;
- at the end of a step every running request gets one token (a joining request's first token);
- when the KV budget would overflow, the most recently joined request is preempted back to the
  head of the queue and later recomputes its prompt + generated tokens (vLLM's recompute mode).

Two knobs shape this for later analyses, both off by default:
- `service_jitter_cv`: each request draws a factor f (lognormal, mean 1, this CV; seeded) that
  multiplies its prefill (prompt tokens × f / rate) and its share of every decode step (the step
  is `decode_base_ms × mean(f) + decode_per_seq_ms × sum(f)` over the running requests). With one
  slot a request's whole service time is f × the noiseless one: noisy, but the saturated mean is
  unchanged because E[f] = 1.
- `batch_delay_ms`: waiting requests join only when they can fill every free slot, or once the
  oldest has waited this long (a batching server's "max batch delay"). An idle engine sleeps
  until then; a busy one keeps stepping and admits at the first step boundary after it.

Step deadlines are chained (a step starts when the previous one was due, not when the event
loop woke up, up to 1 ms late), so the event loop's timer slack does not slow the simulated GPU
down.
Output length: `max_tokens` with ignore_eos / force_max_tokens, else a seeded uniform draw in
[max(min_tokens, max_tokens // 2, 1), max_tokens]; `finish_reason` is "length" when it reaches
`max_tokens`, else "stop".
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from time import perf_counter

from capacity_plugins.simulator.config import SimConfig
from capacity_plugins.simulator.lora import AdapterSlots, adapters_of
from capacity_plugins.simulator.metrics import EngineMetrics


class Sequence:
    """One request inside the engine. The dialect handler owns `on_token` / `on_finish`."""

    __slots__ = (
        "id", "prompt_tokens", "blocks", "max_tokens", "target_tokens", "generated", "arrival",
        "admitted_at", "first_token_at", "last_token_at", "state", "finish_reason", "on_token",
        "on_finish", "prefill_tokens_next", "cached_tokens", "factor", "adapter",
    )

    def __init__(self, id: str, prompt_tokens: int, blocks: list[bytes], max_tokens: int, target_tokens: int,
                 arrival: float, on_token: Callable[[Sequence], None],
                 on_finish: Callable[[Sequence], None]) -> None:
        self.id = id
        self.prompt_tokens = prompt_tokens
        self.blocks = blocks
        self.max_tokens = max_tokens
        self.target_tokens = target_tokens
        self.generated = 0
        self.arrival = arrival
        self.admitted_at: float | None = None
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.state = "new"  # new → waiting → running → done | aborted
        self.finish_reason: str | None = None
        self.on_token = on_token
        self.on_finish = on_finish
        self.prefill_tokens_next = 0
        self.cached_tokens = 0
        self.factor = 1.0  # service-time multiplier (service_jitter_cv), drawn once at submit
        self.adapter: str | None = None  # the LoRA adapter it names (simulator/lora.py); None: the base model

    @property
    def kv_tokens(self) -> int:
        return self.prompt_tokens + self.generated


def jitter_factors(cv: float, seed: int) -> Iterator[float]:
    """The service-time factors requests draw in submission order: lognormal, mean 1, CV `cv`.

    Their own seeded stream, so turning jitter on leaves a seed's output-length and fault draws
    unchanged (and a test can replay the factors a run used).
    """
    sigma = math.sqrt(math.log1p(cv * cv))
    rng = random.Random(f"service-jitter:{seed}")
    while True:
        yield rng.lognormvariate(-sigma * sigma / 2, sigma)


class Engine:
    def __init__(self, config: SimConfig, metrics: EngineMetrics, rng: random.Random) -> None:
        self.config = config
        self.metrics = metrics
        self.rng = rng
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.kv_used = 0
        self._wake = asyncio.Event()
        self._cache: OrderedDict[bytes, None] = OrderedDict()
        self._cache_blocks = max(1, config.kv_cache_tokens // config.block_size)
        self._jitter = jitter_factors(config.service_jitter_cv, config.seed) if config.service_jitter_cv else None
        self._batch_delay_s = config.batch_delay_ms / 1000.0
        # LoRA adapters (simulator/lora.py): who may join a batch, and the step's adapter loads
        self.adapters = AdapterSlots(config) if config.lora_adapters else None
        self._swap_s = 0.0

    # -- called by dialect handlers -----------------------------------------------------------
    def output_length(self, max_tokens: int, min_tokens: int, ignore_eos: bool) -> int:
        if ignore_eos or self.config.force_max_tokens:
            return max_tokens
        low = min(max_tokens, max(min_tokens, max_tokens // 2, 1))
        return self.rng.randint(low, max_tokens)

    def submit(self, seq: Sequence) -> None:
        if self._jitter is not None:
            seq.factor = next(self._jitter)
        seq.state = "waiting"
        seq.prefill_tokens_next = seq.prompt_tokens
        self.waiting.append(seq)
        self.metrics.waiting = len(self.waiting)
        self._wake.set()

    def abort(self, seq: Sequence) -> bool:
        """Drop a request (the client went away, or a fault ends it); False if it had already ended."""
        if seq.state == "waiting":
            self.waiting.remove(seq)
            self.metrics.waiting = len(self.waiting)
        elif seq.state == "running":
            self.running.remove(seq)
            self.kv_used -= seq.kv_tokens
            self.metrics.running = len(self.running)
            # Publish the freed tokens now: if this was the last request the loop goes idle and
            # would never refresh the gauge, leaving /metrics showing KV in use on an empty engine.
            self.metrics.kv_used = self.kv_used
        if seq.state in ("waiting", "running"):
            seq.state = "aborted"
            seq.finish_reason = "abort"
            self.metrics.request_finished(seq, perf_counter())
            return True
        return False

    # -- the loop -------------------------------------------------------------------------------
    async def run(self) -> None:
        cfg = self.config
        due: float | None = None
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                self.metrics.mark_idle(perf_counter())
                await self._wake.wait()
                due = None
            now = perf_counter()
            if not self.running and not self._may_admit(now):
                # Nothing runs and the batch delay holds the queue: sleep until the oldest request
                # has waited it out, or until an arrival may fill every free slot.
                self._wake.clear()
                self.metrics.mark_idle(now)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.waiting[0].arrival + self._batch_delay_s - now)
                due = None
                continue
            # A step starts when the previous one was due, making up at most 1 ms of timer slack
            # (epoll rounds to ms); a longer stall is a slow step, not something to catch up on
            # with implausibly short token gaps.
            start = now if due is None else max(due, now - 0.001)
            if due is not None and start > due:
                self.metrics.step_lag_s += start - due  # simulated time the host took away
            prefill_tokens = self._schedule(start)
            n = len(self.running)
            if self._jitter is not None and n:
                # Each request's decode share scales with its own factor: base × mean + per_seq × sum.
                total = sum(seq.factor for seq in self.running)
                step_s = (cfg.decode_base_ms * total / n + cfg.decode_per_seq_ms * total) / 1000.0
            else:
                step_s = (cfg.decode_base_ms + cfg.decode_per_seq_ms * n) / 1000.0
            step_s += prefill_tokens / cfg.prefill_tokens_per_s + self._swap_s
            due = start + step_s
            self.metrics.mark_busy(start, n)
            delay = due - perf_counter()
            # Even a zero-length step yields, so sockets are served between steps.
            await asyncio.sleep(delay if delay > 0 else 0)
            self._emit(perf_counter())

    def _may_admit(self, now: float) -> bool:
        """Batch delay: waiting requests join only once they can fill every free slot, or once the
        oldest has waited `batch_delay_ms` (0: always)."""
        if not self._batch_delay_s or not self.waiting:
            return True
        free = self.config.max_num_seqs - len(self.running)
        return len(self.waiting) >= free or now - self.waiting[0].arrival >= self._batch_delay_s

    def _schedule(self, now: float) -> float:
        """Admit, preempt; returns the prefill work of the requests that joined (tokens × factor)."""
        cfg = self.config
        joined: list[Sequence] = []
        admit = self._may_admit(now)
        if self.adapters is not None:
            self._swap_s = self._admit_with_adapters(self.adapters, now, joined) if admit else 0.0
        while admit and self.waiting and len(self.running) < cfg.max_num_seqs and self.adapters is None:
            seq = self.waiting[0]
            if self.kv_used + seq.kv_tokens + 1 > cfg.kv_cache_tokens:
                break  # FIFO: the head waits for room, nobody overtakes it
            self.waiting.popleft()
            self._admit(seq, now)
            joined.append(seq)
        # Every running request grows by one token this step; make room by preempting the newest.
        while self.running and self.kv_used + len(self.running) > cfg.kv_cache_tokens:
            victim = self.running.pop()
            self.kv_used -= victim.kv_tokens
            victim.state = "waiting"
            victim.prefill_tokens_next = victim.kv_tokens  # recompute prompt + generated
            self.waiting.appendleft(victim)
            self.metrics.preemptions += 1
        joined = [s for s in joined if s.state == "running"]
        self.metrics.running = len(self.running)
        self.metrics.waiting = len(self.waiting)
        self.metrics.kv_used = self.kv_used
        self.metrics.context = len(joined)
        if self._jitter is not None:
            return sum(s.prefill_tokens_next * s.factor for s in joined)
        return sum(s.prefill_tokens_next for s in joined)

    def _admit_with_adapters(self, slots: AdapterSlots, now: float, joined: list[Sequence]) -> float:
        """Admission with LoRA adapters: FIFO, except that a request whose adapter cannot join the
        batch (max_loras) stays queued while later ones pass it; returns the step's load stall."""
        cfg = self.config
        in_batch = adapters_of(self.running)
        held: list[Sequence] = []
        swap_s = 0.0
        while self.waiting and len(self.running) < cfg.max_num_seqs:
            seq = self.waiting[0]
            if not slots.may_join(seq.adapter, in_batch):
                held.append(self.waiting.popleft())
                continue
            if self.kv_used + seq.kv_tokens + 1 > cfg.kv_cache_tokens:
                break  # the first request that may join waits for room, nobody overtakes it
            self.waiting.popleft()
            swap_s += slots.load(seq.adapter, in_batch)
            if seq.adapter is not None:
                in_batch.add(seq.adapter)
            self._admit(seq, now)
            joined.append(seq)
        self.waiting.extendleft(reversed(held))  # the held ones keep their places at the head
        m = self.metrics
        m.lora_loads = slots.loads
        m.lora_running = sorted(in_batch)
        m.lora_waiting = sorted(adapters_of(self.waiting))
        m.deferred = sum(1 for s in self.waiting if not slots.may_join(s.adapter, in_batch))
        return swap_s

    def _admit(self, seq: Sequence, now: float) -> None:
        cfg = self.config
        to_prefill = seq.prefill_tokens_next
        first = seq.admitted_at is None
        if first:
            seq.admitted_at = now
        if cfg.prefix_cache:
            # Like vLLM: the longest run of cached leading blocks, capped so the last token is
            # always computed (its logits give the next token), i.e. at (tokens - 1) // block_size
            # blocks. A preempted request looks up again when it recomputes; vLLM counts that
            # lookup apart and does not export it, so only first lookups feed the counters.
            hit = 0
            for h in seq.blocks:
                if h not in self._cache:
                    break
                hit += 1
            cached = min(hit, (seq.kv_tokens - 1) // cfg.block_size) * cfg.block_size
            if first:
                seq.cached_tokens = cached
                self.metrics.prefix_queries += seq.prompt_tokens
                self.metrics.prefix_hits += cached
            for h in seq.blocks:
                self._cache[h] = None
                self._cache.move_to_end(h)
            while len(self._cache) > self._cache_blocks:
                self._cache.popitem(last=False)
            to_prefill -= cached
        seq.prefill_tokens_next = to_prefill
        seq.state = "running"
        self.running.append(seq)
        self.kv_used += seq.kv_tokens

    def _emit(self, now: float) -> None:
        finished = []
        itl = self.metrics.itl
        for seq in self.running:
            seq.generated += 1
            self.kv_used += 1
            if seq.first_token_at is None:
                seq.first_token_at = now
                # Counted when the prefill completes, once, even if a preemption made it recompute.
                self.metrics.prompt_tokens += seq.prompt_tokens
                self.metrics.first_token(seq, now)
            else:
                itl.observe(now - seq.last_token_at)  # type: ignore[operator]
            seq.last_token_at = now
            if seq.generated >= seq.target_tokens:
                finished.append(seq)
        self.metrics.generation_tokens += len(self.running)
        for seq in finished:
            self.running.remove(seq)
            self.kv_used -= seq.kv_tokens
            seq.state = "done"
            seq.finish_reason = "length" if seq.generated >= seq.max_tokens else "stop"
        self.metrics.running = len(self.running)
        self.metrics.kv_used = self.kv_used
        # Handlers run after the batch bookkeeping, so one that aborts cannot disturb the loop above.
        for seq in list(self.running) + finished:
            if seq.state != "aborted":
                seq.on_token(seq)
        for seq in finished:
            self.metrics.request_finished(seq, now)
            seq.on_finish(seq)
