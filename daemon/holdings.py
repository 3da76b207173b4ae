"""What one connection holds beyond its replies: the leases of its SESSION
claims and its work streams (QWORK, and SUBSCRIBE "QWORK ...").

They end with the connection: ``release_all`` puts their jobs back to
ready (without a deliveries bump) when it closes, on RESET and at shutdown.
``drop`` forgets them without logging, when the store they live in is
about to be rebuilt from disk after a disk fault (their deadlines still
run there).  Commands reach this object as ``client.holdings``
(``commands.context.Holdings``).

A SESSION's leases are a ``Session``; a work stream is a ``Worker``, which
``daemon.blocking`` serves with the queue's waiters.
"""

from __future__ import annotations

from leaseq.commands.claims import claim_now
from leaseq.commands.pubsub import job_message
from leaseq.commands.replies import Push
from leaseq.storage.job import IN_FLIGHT


class Holdings:
    __slots__ = ("conn", "_session", "workers", "subscriptions", "plain")

    def __init__(self, conn) -> None:
        self.conn = conn
        self._session: Session | None = None
        self.workers: list = []            # work streams (Worker)
        self.subscriptions = 0             # of them, those started by SUBSCRIBE (RESP2: pub/sub context),
        self.plain: list = []              # and plain channels (daemon/channels.py) subscribed to

    def session(self) -> Session:
        """The holder of this connection's SESSION leases."""
        if self._session is None:
            self._session = Session(self.conn)
        return self._session

    def start_work(self, request) -> None:
        self.conn.server.blocking.add_worker(self.conn, request)
        self.subscriptions = len(self.channels())

    def listen(self, channel: bytes) -> None:
        """SUBSCRIBE to a plain channel."""
        if channel not in self.plain:
            self.plain.append(channel)
            self.conn.server.channels.subscribe(self.conn, channel)
        self.subscriptions = len(self.channels())

    def stop_listening(self, channel: bytes) -> None:
        if channel in self.plain:
            self.plain.remove(channel)
            self.conn.server.channels.unsubscribe(self.conn, channel)
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
        return [w.channel for w in self.workers if w.channel is not None] + self.plain

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
        for channel in self.plain:
            self.conn.server.channels.unsubscribe(self.conn, channel)
        self.plain = []
        self.subscriptions = 0


class Session:
    """The leases a connection holds through SESSION claims."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.held: dict = {}          # job -> queue

    def hold(self, queue, job) -> None:
        job.holder = self
        self.held[job] = queue

    def lease_ended(self, job) -> None:
        self.held.pop(job, None)

    def release_all(self, store, now: int) -> None:
        """The connection closed: its leases go back to ready now."""
        by_queue: dict = {}
        for job, queue in self.held.items():
            if not queue.dropped and job.holder is self:
                by_queue.setdefault(queue, []).append(job)
        self.held = {}
        for queue, jobs in by_queue.items():
            store.nack(queue, jobs, now, None, now, closed=True)


class Worker(Session):
    """A work stream: keeps up to ``max`` jobs of one queue leased to its
    connection, each sent as a push message: ``["job", queue, job]`` (QWORK)
    or ``["message", channel, job as JSON]`` (SUBSCRIBE "QWORK ...")."""

    def __init__(self, conn, request) -> None:
        super().__init__(conn)
        self.queue = request.queue
        self.consumer = request.consumer
        self.max = request.max
        self.lease_ms = request.lease_ms
        self.channel = request.channel

    @property
    def room(self) -> int:
        """Free slots: leases that expired (the job is claimable again, even if
        its token still works) no longer take one.  Call after ``fold``."""
        live = sum(1 for job in self.held if job.state is IN_FLIGHT)
        return max(0, self.max - live)

    def lease_ended(self, job) -> None:
        super().lease_ended(job)
        self.conn.server.blocking.wake(self.queue)       # a free slot: serve the queue again

    def _claim(self, count: int) -> list:
        return claim_now(self.conn.server, self.queue, self.consumer, count, self.lease_ms, self)

    def take(self, limit: int) -> int:
        server = self.conn.server
        jobs, ticket = server.store.journal.claimed(server.clock, self._claim, min(limit, self.room))
        name = self.queue.name
        for job in jobs:
            if self.channel is None:
                frame = Push([b"job", name, job])
            else:
                frame = Push([b"message", self.channel, job_message(job, name)])
            self.conn.answer(frame, ticket)
        self.conn.flush()
        return len(jobs)
