"""Write scenarios/traces/burst.jsonl: the shipped example trace (deterministic; rerun to regenerate).

Three minutes of Mooncake-style traffic: 1.5 requests/s, a 30 s burst at 6 requests/s from
t = 60 s to t = 90 s, then 1.5 requests/s again. Three "apps" each put a shared system prompt of
one or two 512-token blocks in front of every request (the same `hash_ids`, so a prefix cache sees
them); the rest of each prompt is its own. Outputs are 16–64 tokens.

Against the embedded simulator (8 slots, about 12 requests/s at these lengths) the trace holds the
SLO at 1×; at 3× the burst (18 requests/s) is past its capacity and breaks it.

It also writes scenarios/traces/sessions.jsonl: 16 conversations of 4 turns each, started over
the first 20 s, 4–6 s of think time between turns; a first turn of 1000–1400 tokens (its own
system prompt and question), later turns a 60–120-token follow-up. Replayed with
`load.sessions: true`, every turn sends the history with the server's answers, so the prompts
grow and a prefix cache serves the history (scenarios/sessions_replay.yaml).

    python scripts/make_example_trace.py [-o scenarios/traces/burst.jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

BLOCK = 512  # tokens per hash_ids block (Mooncake's convention; the scenario's load.block_tokens)
# (start s, end s, requests/s)
PHASES = [(0.0, 60.0, 1.5), (60.0, 90.0, 6.0), (90.0, 180.0, 1.5)]
APPS = {"chat": [0], "rag": [1, 2], "code": [3]}  # app → its shared prefix blocks


def build(seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    rows: list[dict] = []
    next_id = 100  # ids below are the apps' shared blocks
    for start, end, rate in PHASES:
        t = start
        while True:
            t += rng.expovariate(rate)
            if t >= end:
                break
            app = rng.choice(sorted(APPS))
            shared = APPS[app]
            tail = rng.randint(64, 512)
            n_in = len(shared) * BLOCK + tail
            own = math.ceil(tail / BLOCK)
            ids = shared + list(range(next_id, next_id + own))
            next_id += own
            rows.append({"timestamp": int(t * 1000), "input_length": n_in, "output_length": rng.randint(16, 64),
                         "hash_ids": ids, "class": app, "session_id": f"{app}-{rng.randint(1, 20)}"})
    return rows


def build_sessions(seed: int = 11, sessions: int = 16, turns: int = 4) -> list[dict]:
    rng = random.Random(seed)
    rows: list[dict] = []
    for k in range(sessions):
        t = rng.uniform(0.0, 20.0)
        for turn in range(1, turns + 1):
            n_in = rng.randint(1000, 1400) if turn == 1 else rng.randint(60, 120)
            rows.append({"timestamp": int(t * 1000), "input_length": n_in, "output_length": rng.randint(24, 40),
                         "session_id": f"conv-{k}", "class": "chat"})
            t += rng.uniform(4.0, 6.0)
    rows.sort(key=lambda r: r["timestamp"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default=str(Path(__file__).resolve().parents[1] / "scenarios/traces/burst.jsonl"))
    args = ap.parse_args()
    rows = build()
    Path(args.output).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"{args.output}: {len(rows)} requests")
    conv = Path(args.output).with_name("sessions.jsonl")
    conv_rows = build_sessions()
    conv.write_text("".join(json.dumps(r) + "\n" for r in conv_rows), encoding="utf-8")
    print(f"{conv}: {len(conv_rows)} turns")


if __name__ == "__main__":
    main()
