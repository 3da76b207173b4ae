"""Schedules and kill -9 (docs/semantics.md §3.9): an EVERY 200 schedule with
MISFIRE all on a daemon killed with SIGKILL every 0.3-0.9 s and started
again: every tick from the first to the last is pushed exactly once (the
push and the schedule's advance are one FIRE record), on the running clock."""

from __future__ import annotations

import random
import time

from harness import Daemon, as_map


def test_every_tick_exactly_once_across_kill_9_restarts(tmp_path):
    rng = random.Random(20261123)
    d = Daemon(tmp_path / "data").start()
    try:
        c = d.client(protocol=2)
        first = c.execute_command("QSCHEDULE", "soak", "beat", "x", "EVERY", 200, "MISFIRE", "all")
        restarts, deadline = 0, time.monotonic() + 45
        while restarts < 10 and time.monotonic() < deadline:
            time.sleep(rng.uniform(0.3, 0.9))
            d.kill()
            d.restart()
            restarts += 1
        c = d.client(protocol=2)
        time.sleep(0.5)
        d.stop()                                   # a clean stop: nothing fires after we look
        d.start()
        c = d.client(protocol=2)
        pipe = c.pipeline(transaction=True)          # one MULTI: no tick fires between the two looks
        pipe.execute_command("QSCHEDULES", "soak")
        pipe.execute_command("QSCAN", "soak", 0, "COUNT", 100_000)
        listed, (cursor, jobs) = pipe.execute()
        assert cursor in (b"0", 0, "0")
        schedule = as_map(listed[0])
        ticks = [as_map(j)[b"tick"] for j in jobs]
    finally:
        d.kill()
    duplicates = len(ticks) - len(set(ticks))
    expected = list(range(first, schedule[b"last"] + 1, 200))
    gaps = len(set(expected) - set(ticks))
    print(f"\nschedule soak: {restarts} kill -9 restarts, {len(ticks)} ticks from {first} to "
          f"{schedule[b'last']}, duplicates {duplicates}, gaps {gaps}")
    assert restarts >= 5
    assert duplicates == 0 and gaps == 0
    assert sorted(ticks) == expected
    assert schedule[b"fired"] == len(ticks) and schedule[b"skipped"] == 0
