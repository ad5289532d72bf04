"""Request attempt ids (client/ids.py): unique in a process and across forked worker processes."""

from __future__ import annotations

import os
import re

from capacity_plugins.client.ids import request_id


def test_ids_are_32_hex_digits_and_unique() -> None:
    ids = [request_id() for _ in range(100_000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids[:100] + ids[-100:])
    assert len(set(ids)) == len(ids)


def test_a_forked_process_draws_its_own_prefix() -> None:
    # Locust's --processes forks its workers after the package is imported: a child that kept the
    # parent's prefix and counter would hand out the parent's next ids.
    parent = [request_id() for _ in range(3)]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first ids, then out without pytest's teardown
        os.close(read)
        os.write(write, " ".join(request_id() for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 4096).decode().split()
    os.close(read)
    os.waitpid(pid, 0)
    mine = [request_id() for _ in range(3)]
    assert len(child) == 3 and not set(child) & set(parent + mine)
    assert {c[:16] for c in child} != {p[:16] for p in parent}
    assert {m[:16] for m in mine} == {p[:16] for p in parent}
