"""A reading of the daemon's clock: time in ms since the epoch, real time
plus an offset, or frozen (docs/semantics.md §3.6).  What changes it, and
logs the change, is ``daemon.clock.Clock``; here only its state and
``now``, which every command asks (``commands.parties.Host.clock``)."""

from __future__ import annotations

import time

from .flavour import compiled_twin


class Reading:
    """The clock's state and ``now``, read many times a command (compiled
    twin: ``storage/_clock.pyx``)."""

    __slots__ = ("offset", "frozen", "frozen_at")

    def __init__(self, offset: int, frozen: bool, frozen_at: int) -> None:
        self.offset = offset
        self.frozen = frozen
        self.frozen_at = frozen_at

    def now(self) -> int:
        return self.frozen_at if self.frozen else int(time.time() * 1000) + self.offset


seconds = time.perf_counter     # a duration's clock, in seconds (what the command timings read)

PureReading = Reading
_twin = compiled_twin("leaseq.storage._clock")
COMPILED = _twin is not None
if COMPILED:
    Reading, seconds = _twin.Reading, _twin.seconds      # noqa: F811
