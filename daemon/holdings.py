"""What one connection holds beyond its replies: the leases of its SESSION
claims and its work streams (QWORK, and SUBSCRIBE "QWORK ...").

They end with the connection: ``release_all`` puts their jobs back to
ready (without a deliveries bump) when it closes, on RESET and at shutdown.
``drop`` forgets them without logging, when the store they live in is
about to be rebuilt from disk after a disk fault (their deadlines still
run there).  Commands reach this object as ``client.holdings``
(``commands.context.Holdings``).
"""

from __future__ import annotations

from .blocking import Session


class Holdings:
    __slots__ = ("conn", "_session", "workers", "subscriptions")

    def __init__(self, conn) -> None:
        self.conn = conn
        self._session: Session | None = None
        self.workers: list = []            # work streams (blocking.Worker)
        self.subscriptions = 0             # of them, those started by SUBSCRIBE (RESP2: pub/sub context)

    def session(self) -> Session:
        """The holder of this connection's SESSION leases."""
        if self._session is None:
            self._session = Session(self.conn)
        return self._session

    def start_work(self, request) -> None:
        self.conn.server.blocking.add_worker(self.conn, request)
        self.subscriptions = len(self.channels())

    def stop_work(self, channel: bytes) -> None:
        """UNSUBSCRIBE: that stream's leases go back to ready now."""
        server = self.conn.server
        for worker in self.workers:
            if worker.channel == channel:
                server.blocking.remove_worker(worker)
                worker.release_all(server.store, server.now_ms())
                server.committer.touch()
                self.work_ended(worker)
                break

    def work_ended(self, worker) -> None:
        """A stream is over (UNSUBSCRIBE, or its queue was dropped)."""
        if worker in self.workers:
            self.workers.remove(worker)
        self.subscriptions = len(self.channels())

    def channels(self) -> list[bytes]:
        return [w.channel for w in self.workers if w.channel is not None]

    def works_through_another_stream(self, queue: bytes, channel: bytes | None) -> bool:
        return any(w.queue.name == queue and w.channel != channel for w in self.workers)

    def release_all(self) -> None:
        """SESSION and QWORK leases go back to ready the moment we let go."""
        server = self.conn.server
        if server.committer is None or server.committer.closed:
            return
        now = server.now_ms()
        if self._session is not None:
            self._session.release_all(server.store, now)
            self._session = None
        for worker in self.workers:
            server.blocking.remove_worker(worker)
            worker.release_all(server.store, now)
        self.drop()
        server.committer.touch()

    def drop(self) -> None:
        """Forget every holding without logging (a disk fault: the store they
        live in is being rebuilt from disk).  Their tables of held jobs are
        emptied: a job points at its holder, so a holder that kept pointing
        at its jobs would make a cycle that only the cyclic collector could
        free, and jobs are outside its reach (storage/_job.pyx)."""
        if self._session is not None:
            self._session.held = {}
        for worker in self.workers:
            worker.held = {}
        self._session = None
        self.workers = []
        self.subscriptions = 0
