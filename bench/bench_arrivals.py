"""Open-loop pacing: how closely the pacer hands arrivals to users, against a bare gevent timer.

Both run in one process, one after the other, on the same 200 rps Poisson schedule: the bare loop
only sleeps until each due time (the floor any gevent-based pacer can reach); the Pacer also
queues the arrival and wakes a waiting user. Reported: hand-off lag p50/p99 of each and their
ratio, plus schedule generation throughput (1 h at 100 rps) vs. a pure-Python renewal loop.
"""

import locust  # noqa: F401, I001 -- gevent monkey-patching first

import random
import time

import gevent
import numpy as np

from capacity_plugins.client.pacer import Pacer
from capacity_plugins.rehearsal.arrivals import schedule

RATE, SECONDS, USERS = 200.0, 5.0, 32


def bare_loop(offsets: np.ndarray) -> np.ndarray:
    start = time.time() + 0.1
    lags = []
    for off in offsets:
        due = start + float(off)
        d = due - time.time()
        if d > 0:
            gevent.sleep(d)
        lags.append(time.time() - due)
    return np.array(lags) * 1000


def pacer_loop(offsets: np.ndarray) -> np.ndarray:
    pacer = Pacer(idle_poll_s=0.05)
    lags: list[float] = []

    def user() -> None:
        while True:
            due = pacer.wait_next()
            if due is None:
                if pacer.step is None:
                    return
                continue
            lags.append(time.time() - due)
            gevent.sleep(0.01)  # a short "request"

    pacer.begin(0, time.time() + 0.1, offsets)
    users = [gevent.spawn(user) for _ in range(USERS)]
    gevent.sleep(SECONDS + 0.5)
    pacer.stop()
    gevent.joinall(users, timeout=1)
    return np.array(lags) * 1000


def main() -> None:
    offsets = schedule("poisson", RATE, SECONDS, seed=1)
    bare = bare_loop(offsets)
    paced = pacer_loop(offsets)
    b50, b99 = np.percentile(bare, [50, 99])
    p50, p99 = np.percentile(paced, [50, 99])
    print(f"hand-off lag at {RATE:g} rps, {len(offsets)} arrivals, {USERS} users")
    print(f"  bare gevent timer: p50 {b50:.2f} ms  p99 {b99:.2f} ms")
    print(f"  Pacer            : p50 {p50:.2f} ms  p99 {p99:.2f} ms  (p99 ratio {p99 / max(b99, 1e-3):.2f}x)")

    t0 = time.perf_counter()
    n = len(schedule("gamma", 100.0, 3600.0, cv=2.0, seed=2))
    t_np = time.perf_counter() - t0
    t0 = time.perf_counter()
    rnd, t, count = random.Random(2), 0.0, 0
    while t < 3600.0:
        t += rnd.gammavariate(0.25, 1 / 25.0)
        count += 1
    t_py = time.perf_counter() - t0
    print(f"schedule of 1 h at 100 rps (gamma cv 2): {n} arrivals, numpy {t_py / t_np:.1f}x faster than a Python loop")


if __name__ == "__main__":
    main()
