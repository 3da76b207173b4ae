"""The command core without sockets: ``daemon.dispatch.execute`` and the real
handlers, on a real ``Store``, with a clock the test sets.

``Core`` and ``Client`` implement the handler context
(``commands.context.ServerContext`` / ``ClientContext``) in memory; the
daemon's ``Server`` and ``Connection`` implement the same Protocols over
sockets.  A ``Core`` runs on an in-memory store (``Journal(MemoryLog())``) or
on the store of an opened data directory (``Core(datadir.store)``), so the
storage tests can crash and reopen what the commands wrote.

What stays out: blocking (a QCLAIM ... BLOCK that finds nothing answers
``PARKED``; it never waits), QWORK streams, and the network.
"""

from __future__ import annotations

import weakref

from leaseq.commands import errors
from leaseq.commands.acl import Acl
from leaseq.daemon.channels import Channels
from leaseq.daemon.replication import Replication
from leaseq.daemon.slowlog import SlowLog
from leaseq.commands.claims import ClaimWait
from leaseq.commands.replies import Error, Map, Record, Simple, Verbatim
from leaseq.commands.table import TABLE
from leaseq.daemon import config
from leaseq.daemon.clock import Clock
from leaseq.commands.parties import Caller, Host, Stats
from leaseq.daemon.dispatch import execute
from leaseq.daemon.metrics import Metrics
from leaseq.storage import queries
from leaseq.storage.config import QueueConfig
from leaseq.storage.datadir import DataDir
from leaseq.storage.history import History
from leaseq.storage.journal import Journal
from leaseq.storage.store import Store
from leaseq.storage.wal import Faults, MemoryLog

T0 = 1_700_000_000_000
PARKED = "parked"     # what ``call`` answers for a claim the daemon would park


class CoreConfiguration:
    """CONFIG of a ``Core``: the daemon's checks, no file; the slow log follows."""

    def __init__(self, core: "Core") -> None:
        self.core = core

    def items(self) -> list[tuple[str, str]]:
        return config.items(self.core.settings)

    def set(self, pairs) -> None:
        self.core.settings, _changes = config.apply_set(self.core.settings, pairs)
        self.core.slowlog.configure(self.core.settings)

    def rewrite(self) -> None:
        raise errors.NO_CONFIG_FILE          # (an in-memory core has no file)


class Core(Host):
    """A ``ServerContext`` in memory.  ``clock`` is frozen at ``now`` and moves
    only when the test says so (``at``)."""

    def __init__(self, store: Store | None = None, now: int = T0, **settings) -> None:
        self.settings = config.Settings(**settings)
        self.acl = Acl(TABLE, self.settings.users, self.settings.requirepass)
        if store is None:
            store = Store(Journal(MemoryLog()))
            store.default_config = QueueConfig(durability=self.settings.default_durability)
        self.store = store
        self.stats = Stats()
        self.clock = Clock(0, True, now, on_change=lambda *state: None)
        self.clients: dict = {}
        self.oom = False
        self.loading = False
        self.disk_error = None
        self.read_only = False
        self.replicas_gate = 0
        self.paused, self.pause = False, None
        self.slowlog = SlowLog(self, self.settings)
        self.replication = Replication(self)       # a primary with no replicas (ROLE, INFO)
        self.channels = Channels()
        self.faults = Faults()
        self.metrics = Metrics(self)
        self.history = History("")                 # no minute closes here: QHISTORY answers none
        self.configuration = CoreConfiguration(self)
        self.dropped: list = []
        self.shutdown_reason = None
        self.last_save = 0

    @property
    def auth_required(self) -> bool:
        return self.acl.auth_required

    def at(self, now: int) -> None:
        """Set the clock (tests may step it to any moment)."""
        self.clock.freeze(now)

    def reset_stats(self) -> None:
        self.stats = Stats()

    def info_sections(self) -> dict:
        return {"queues": [(q.name.decode(), queries.summary(q)) for q in self.store.queues.values()]}

    def blocked_on(self, queue) -> int:
        return 0

    def queue_dropped(self, queue) -> None:
        self.dropped.append(queue)

    def request_shutdown(self, reason: str, force: bool = False) -> bool:
        self.shutdown_reason = reason
        return True

    def bgsave(self, schedule: bool) -> str:
        """No child process here: the snapshot is written at once, in this
        thread, when the store has a data directory."""
        d = _dirs.get(self.store)
        if d is not None:
            self.last_save = d.take_snapshot(self.now_ms()).ts // 1000
        return "started"

    def lastsave(self) -> int:
        return self.last_save


class Client(Caller):
    """A ``ClientContext`` in memory; ``holder`` receives SESSION leases."""

    def __init__(self, core: Core, holder=None) -> None:
        self.server = core
        self.id = len(core.clients) + 1
        core.clients[self.id] = self
        self.addr = self.laddr = "127.0.0.1:0"
        self.fd = -1
        self.name = None
        self.resp3 = False
        self.authenticated = not core.auth_required
        self.user = "default"
        self.acl_user = core.acl.default
        self.lib_name = self.lib_ver = ""
        self.multi = None
        self.multi_dirty = False
        self.in_exec = False
        self.last_command = "NULL"
        self.created = self.last_active = 0.0
        self.flags = "N"
        self.multi_len = -1
        self.query_buffer = self.output_buffer = 0
        self.holdings = Holdings(holder)
        self.closing = self.killed = False

    def close_after_reply(self) -> None:
        self.closing = True

    def kill(self) -> None:
        self.killed = True

    def reset(self) -> None:
        self.multi = None
        self.resp3 = False


class Holdings:
    """A ``Holdings`` in memory: SESSION leases go to ``holder``; work
    streams need the daemon."""

    def __init__(self, holder) -> None:
        self.holder = holder
        self.subscriptions = 0

    def session(self):
        if self.holder is None:
            raise AssertionError("give Client a holder to use SESSION")
        return self.holder

    def start_work(self, request) -> None:
        raise AssertionError("QWORK streams need the daemon (tests/integration)")

    def stop_work(self, channel: bytes) -> None:
        raise AssertionError("work streams need the daemon (tests/integration)")

    def channels(self) -> list:
        return []

    def works_through_another_stream(self, queue: bytes, channel) -> bool:
        return False


def _arg(a) -> bytes:
    if isinstance(a, bytes):
        return a
    if isinstance(a, int):
        return b"%d" % a
    return str(a).encode()


def plain(reply):
    """A reply as plain Python: maps and job records as dicts (bytes keys),
    simple strings as str, errors as ``Error`` values."""
    if isinstance(reply, (Map, Record)):
        return {k: plain(v) for k, v in reply.items}
    if isinstance(reply, (list, tuple)):
        return [plain(v) for v in reply]
    if isinstance(reply, Simple):
        return str(reply)
    if isinstance(reply, Verbatim):
        return reply.text
    if isinstance(reply, ClaimWait):
        return PARKED
    return reply


def run(client: Client, *args, now: int | None = None):
    """Execute one command: ``(reply as plain Python, ticket)``; an error
    reply is raised as ``Error``."""
    if now is not None:
        client.server.at(now)
    reply, ticket = execute(client, [_arg(a) for a in args])
    if isinstance(reply, Error):
        raise reply
    return plain(reply), ticket


def call(client: Client, *args, now: int | None = None):
    """Execute one command and return its reply (see ``run``)."""
    return run(client, *args, now=now)[0]


# -- commands as the storage tests use them ---------------------------------------------------------
#
# Each helper sends the command a client would send, through ``execute``, and
# answers with the store's own objects (``Job``, ``Queue``) so that tests can
# look at their state.  Helpers take the store first: a test that reopens a
# data directory carries on with the new store.

LEASE = 1_000
_clients: "weakref.WeakKeyDictionary[Store, Client]" = weakref.WeakKeyDictionary()
_dirs: "weakref.WeakKeyDictionary[Store, DataDir]" = weakref.WeakKeyDictionary()


def client_of(store: Store) -> Client:
    """The one client this store's tests talk through (its ``Core`` is cached)."""
    c = _clients.get(store)
    if c is None:
        c = _clients[store] = Client(Core(store))
    return c


def open_store(directory, now: int, **options) -> Store:
    """Open (and recover) a data directory; its store, ready for commands."""
    d = DataDir.open(str(directory), now, **options)
    _dirs[d.store] = d
    return d.store


def datadir_of(store: Store) -> DataDir:
    return _dirs[store]


def take_snapshot(store: Store, now: int = T0):
    """Write a snapshot of the store's data directory in this process (``DataDir.take_snapshot``)."""
    return datadir_of(store).take_snapshot(now)


def close(store: Store) -> None:
    """A clean stop (``DataDir.close``)."""
    _dirs[store].close()


def crash(store: Store) -> None:
    """The process dies after the end of its event-loop turn: what was written
    stays (and the kernel closes the files), nothing else runs."""
    d = _dirs[store]
    d.wal.flush()
    d.wal.close()
    d.release_lock()


def options_of(config: dict) -> list:
    """QCREATE options from QueueConfig field names (``retain_dead=5`` ...)."""
    out: list = []
    for name, value in config.items():
        out.append(name.upper().replace("_", "-"))
        if name == "backoff":
            out += list(value)
        else:
            out.append(b"" if value is None else value)
    return out


def new_queue(store: Store, name=b"q", durability="fsync", now=T0, **config):
    """QCREATE name DURABILITY durability [options]; returns the queue."""
    config["durability"] = durability
    call(client_of(store), "QCREATE", name, *options_of(config), now=now)
    return store.queues[name]


def push(store, q, n=1, now=T0, priority=5, delay=0, payload=b"job", max_deliveries=0, expire_ms=0):
    """QPUSHMANY of ``n`` jobs, payload ``<payload><id>``; returns the jobs."""
    first = q.next_id
    options = ["PRIORITY", priority]
    if delay:
        options += ["DELAY", delay]
    if max_deliveries:
        options += ["MAXDELIVERIES", max_deliveries]
    if expire_ms:
        options += ["EXPIRE", expire_ms]
    payloads = [payload + b"%d" % (first + i) for i in range(n)]
    got = call(client_of(store), "QPUSHMANY", q.name, n, *payloads, *options, now=now)
    assert got == list(range(first, first + n))
    return [q.jobs[i] for i in got]


def push_key(store, q, key, scope=b"queued", now=T0, delay=0) -> int:
    """QPUSH ... KEY key WHILE scope (payload ``keyed<id>``): the new job's id,
    or the id of the job holding the key in that scope."""
    options = ["KEY", key, "WHILE", scope] + (["DELAY", delay] if delay else [])
    return call(client_of(store), "QPUSH", q.name, b"keyed%d" % q.next_id, *options, now=now)


def claim(store, q, now, count=1, lease=LEASE, consumer=b"w", holder=None) -> list:
    """QCLAIM (SESSION when a ``holder`` is given); returns the leased jobs."""
    client = client_of(store) if holder is None else Client(client_of(store).server, holder)
    options = ["COUNT", count, "LEASE", lease] + (["SESSION"] if holder is not None else [])
    got = call(client, "QCLAIM", q.name, consumer, *options, now=now)
    return [q.jobs[j[b"id"]] for j in got]


def claim_ids(store, q, now, count=1, lease=LEASE) -> list[int]:
    return [j.id for j in claim(store, q, now, count, lease)]


def ack(store, q, tokens, now) -> int:
    """QACK: how many jobs were completed (stale tokens are skipped)."""
    if not tokens:
        return 0           # nothing to send: QACK needs a token
    return call(client_of(store), "QACK", q.name, *tokens, now=now)


def nack(store, q, tokens, now, delay=0, error=None) -> int:
    """QNACK ... DELAY delay [ERROR error]."""
    if not tokens:
        return 0
    options = ["DELAY", delay] + (["ERROR", error] if error is not None else [])
    return call(client_of(store), "QNACK", q.name, *tokens, *options, now=now)


def nack_dead(store, q, tokens, now, error=None) -> int:
    """QNACK ... DEAD [ERROR error]."""
    if not tokens:
        return 0
    options = ["DEAD"] + (["ERROR", error] if error is not None else [])
    return call(client_of(store), "QNACK", q.name, *tokens, *options, now=now)


def extend(store, q, tokens, now, lease=LEASE) -> int:
    """QEXTEND ... LEASE lease: how many tokens got a new deadline."""
    if not tokens:
        return 0
    got = call(client_of(store), "QEXTEND", q.name, *tokens, "LEASE", lease, now=now)
    return sum(1 for d in got if d is not None)


def delete(store, q, jids, now) -> int:
    """QDEL: how many jobs were removed."""
    return call(client_of(store), "QDEL", q.name, *jids, now=now)


def ticket_of(store, *args, now=T0):
    """The ticket of one command (what its reply waits for), or None."""
    return run(client_of(store), *args, now=now)[1]
