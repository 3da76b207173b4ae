"""A queue's schedules (docs/semantics.md §3.9): ``queue.schedules``.

Apart from ``Queue`` so that the queue object keeps the commands of a job's
life; ``Schedules`` (threads) and ``AsyncSchedules`` (asyncio) send QSCHEDULE,
QUNSCHEDULE and QSCHEDULES through their queue's connection and error
translation.
"""

from __future__ import annotations

from typing import Any

from . import protocol
from .protocol import Payload


class Schedules:
    """``queue.schedules``: ``add``, ``remove`` and ``list``."""

    def __init__(self, queue) -> None:
        self._queue = queue

    def add(self, name: str, payload: Payload, **options: Any) -> int:
        """QSCHEDULE: create or replace schedule ``name`` pushing ``payload``
        at each tick: ``cron`` (with ``tz``) or ``every_ms``, and
        ``priority``, ``misfire``, ``overlap``, ``meta`` (every job's META).
        Returns the next tick (ms epoch)."""
        return self._queue._execute(protocol.schedule_command(self._queue.name, name, payload, **options))

    def remove(self, name: str) -> bool:
        """QUNSCHEDULE: False when there was no such schedule."""
        return self._queue._execute(["QUNSCHEDULE", self._queue.name, name]) == 1

    def list(self) -> list[dict[str, Any]]:
        """QSCHEDULES: name, spec, next, last, fired, skipped, misfire,
        overlap, priority and payload of each schedule."""
        return protocol.parse_schedules(self._queue._execute(["QSCHEDULES", self._queue.name]))


class AsyncSchedules:
    """``Schedules`` for ``leaseq.client.aio.Queue``: the same methods, as coroutines."""

    def __init__(self, queue) -> None:
        self._queue = queue

    async def add(self, name: str, payload: Payload, **options: Any) -> int:
        return await self._queue._execute(protocol.schedule_command(self._queue.name, name, payload, **options))

    async def remove(self, name: str) -> bool:
        return await self._queue._execute(["QUNSCHEDULE", self._queue.name, name]) == 1

    async def list(self) -> list[dict[str, Any]]:
        return protocol.parse_schedules(await self._queue._execute(["QSCHEDULES", self._queue.name]))
