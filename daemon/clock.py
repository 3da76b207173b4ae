"""The daemon's clock (docs/semantics.md §3.6, DEBUG CLOCK).

Time in ms since the epoch: real time plus an offset, or frozen.  Every
change is handed to ``on_change(offset, frozen, frozen_at)`` (the store logs
it as a CLOCK record, so a restart keeps a test's time); it only moves
forward.
"""

from __future__ import annotations

import time

from leaseq.storage.clock import COMPILED, Reading    # noqa: F401  (COMPILED: daemon/resp.py reads it)


class Clock(Reading):
    def __init__(self, offset: int, frozen: bool, frozen_at: int, on_change) -> None:
        super().__init__(offset, frozen, frozen_at)
        self._on_change = on_change

    def advance(self, ms: int) -> None:
        if self.frozen:
            self._set(self.offset, True, self.frozen_at + ms)
        else:
            self._set(self.offset + ms, False, 0)

    def freeze(self, at: int) -> None:
        self._set(self.offset, True, at)

    def resume(self) -> None:
        if self.frozen:
            self._set(self.frozen_at - int(time.time() * 1000), False, 0)

    def _set(self, offset: int, frozen: bool, frozen_at: int) -> None:
        self.offset, self.frozen, self.frozen_at = offset, frozen, frozen_at
        self._on_change(offset, frozen, frozen_at)
