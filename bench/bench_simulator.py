"""How many streamed tokens/s the simulator writes on one core, read by a bare-socket client.

The simulator runs with zero-cost steps (decode 0 ms, huge prefill rate) so the figure is its
own HTTP + framing + scheduling cost, pinned to one core when the OS allows; the client (asyncio
raw sockets, counting content chunks) runs in this process on another core. Prints tokens/s and
the ratio to the 20 000 tokens/s target (the simulator must never be the bottleneck in tests).
Also measured: the same through Triton's generate_stream framing (sorted-key JSON per event), so
a Triton-dialect load test is not limited by the simulator either. Prints, never asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from capacity_plugins.simulator.config import SimConfig  # noqa: E402
from capacity_plugins.simulator.launch import SimulatorProcess  # noqa: E402

TARGET_TOKENS_PER_S = 20_000


class Framing:
    """One API's streamed request and how its response's tokens and end are recognised."""

    def __init__(self, path: bytes, body: bytes, token: bytes, end: bytes) -> None:
        self.path, self.body, self.token, self.end = path, body, token, end

    def request(self, max_tokens: int) -> bytes:
        body = self.body % max_tokens
        return (b"POST %b HTTP/1.1\r\nHost: b\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%b" % (self.path, len(body), body))


OPENAI = Framing(b"/v1/chat/completions",
                 b'{"model":"sim-model","messages":[{"role":"user","content":"bench"}],"stream":true,'
                 b'"ignore_eos":true,"max_tokens":%d}', b'"delta":{"content":', b"data: [DONE]\n\n\r\n0\r\n\r\n")
TRITON = Framing(b"/v2/models/sim-model/generate_stream",
                 b'{"text_input":"bench","stream":true,"ignore_eos":true,"max_tokens":%d}', b'"text_output":',
                 b"}\n\n\r\n0\r\n\r\n")


async def stream_loop(port: int, framing: Framing, max_tokens: int, deadline: float, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    req = framing.request(max_tokens)
    token, end = framing.token, framing.end
    while time.perf_counter() < deadline:
        writer.write(req)
        tail = b""
        while True:
            data = await reader.read(65536)
            if not data:
                raise RuntimeError("simulator closed the connection")
            # Count on the joined edge too, so a marker split across reads is counted once.
            joined = tail + data
            counts[0] += joined.count(token) - tail.count(token)
            if joined.endswith(end):
                break
            tail = joined[-64:]
    writer.close()


async def drive(port: int, framing: Framing, streams: int, seconds: float, max_tokens: int) -> tuple[int, float]:
    counts = [0]
    # Warm up (connections, first-request costs) before the measured window.
    await asyncio.gather(*(stream_loop(port, framing, 8, time.perf_counter() + 0.3, [0]) for _ in range(streams)))
    start = time.perf_counter()
    await asyncio.gather(*(stream_loop(port, framing, max_tokens, start + seconds, counts) for _ in range(streams)))
    return counts[0], time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--streams", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--max-tokens", type=int, default=256)
    args, _ = ap.parse_known_args()
    config = SimConfig(max_num_seqs=max(args.streams, 1), decode_base_ms=0.0, decode_per_seq_ms=0.0,
                       prefill_tokens_per_s=1e9, max_model_len=4096)
    with tempfile.TemporaryDirectory() as tmp:
        for label, framing, truth in (("no truth log", OPENAI, None),
                                      ("with truth log", OPENAI, Path(tmp) / "truth.jsonl"),
                                      ("triton generate_stream", TRITON, None)):
            with SimulatorProcess(config, truth_log=truth) as sim:
                cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
                if len(cpus) >= 2:
                    os.sched_setaffinity(sim.pid, {cpus[0]})
                    os.sched_setaffinity(0, set(cpus[1:]))
                tokens, elapsed = asyncio.run(drive(sim.port, framing, args.streams, args.seconds,
                                                    args.max_tokens))
                if len(cpus) >= 2:
                    os.sched_setaffinity(0, set(cpus))
            rate = tokens / elapsed
            pinned = "simulator pinned to one core" if len(cpus) >= 2 else "not pinned: one CPU visible"
            print(f"[{label}] {tokens} tokens in {elapsed:.2f} s over {args.streams} streams ({pinned})")
            print(f"[{label}] tokens_per_s={rate:.0f} target={TARGET_TOKENS_PER_S} "
                  f"ratio_to_target={rate / TARGET_TOKENS_PER_S:.2f}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
