"""The timer of the store's schedules (storage/schedules.py).

One ``loop.call_later`` at a time, armed for the first tick of any
schedule (``Timetable.first``) and moved whenever that changes (the
timetable calls ``arm``).  When it rings, every due schedule fires
(``Timetable.fire_due``: the jobs and the advance in one FIRE record per
schedule) and the end of the turn serves whoever waits on those queues.
It rings once at start, after recovery, so ticks missed while the daemon
was down are handled (MISFIRE) before anything is served.  While the DEBUG
clock is frozen nothing rings by itself: ``time_moved`` fires what a move
made due.
"""

from __future__ import annotations


class Alarm:
    def __init__(self, server, loop) -> None:
        self.server = server
        self.loop = loop
        self.handle = None
        self.due: int | None = None

    def attach(self, store) -> None:
        """Serve ``store``'s schedules from now on (after recovery, or a disk
        fault's rebuild), firing what came due meanwhile."""
        store.timetable.on_change = self.arm
        self.ring()

    def arm(self) -> None:
        if self.server.store.following:      # schedules fire on the primary only; its FIRE records come here
            self.cancel()
            return
        first = self.server.store.timetable.first()
        if first == self.due and self.handle is not None:
            return
        self.cancel()
        if first is None or self.server.clock.frozen:
            return
        self.due = first
        delay = max(0, first - self.server.now_ms() + 1) / 1000.0
        self.handle = self.loop.call_later(delay, self.ring)

    def ring(self) -> None:
        self.handle = self.due = None
        if self.server.store.following:
            return
        if self.server.store.timetable.fire_due(self.server.now_ms()):
            self.server.committer.touch()
        self.arm()

    def time_moved(self) -> None:
        self.cancel()
        self.ring()

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.handle = self.due = None
