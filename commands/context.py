"""What a command handler may use: the handler context, written down.

Every handler is ``handler(client, args) -> reply`` (``commands.table``).
``client`` is the connection the command came from and ``client.server`` the
daemon; these Protocols list all that handlers (and the dispatcher) read or
call on them, so a handler never reaches further.  The daemon's
``Connection`` and ``Server`` implement them over sockets; the unit tests
implement them in memory (tests/unit/core.py) and drive
``daemon.dispatch.execute`` with no socket at all.

Arrows point one way: the daemon imports commands, commands import storage;
commands see the daemon only through these Protocols.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from leaseq.commands.acl import Acl, User
from leaseq.commands.parties import Stats      # the server's counters: a concrete class both servers share
from leaseq.storage.history import History
from leaseq.storage.queue import Queue
from leaseq.storage.store import Store
from leaseq.storage.wal import Faults


class Metrics(Protocol):
    def command(self, name: str, seconds: float) -> None: ...


class Replicas(Protocol):
    """What the commands ask of a node's replicas (daemon/replicas.py)."""

    def is_peer(self, client) -> bool: ...
    def good(self) -> int: ...
    def replconf(self, client, pairs: list) -> object: ...


class Replication(Protocol):
    """What the replication commands ask of the daemon (daemon/replication.py)."""

    def follow(self, host: str, port: int) -> str: ...
    def promote(self) -> str: ...
    def drop_link(self) -> int: ...
    replicas: Replicas
    waits: object                    # WAIT, WAITAOF: ``wait``, ``waitaof`` (daemon/replicawaits.py)
    failover: object                 # FAILOVER: ``running``, ``start``, ``abort`` (daemon/failover.py)
    following: bool                  # a replica now
    def role_reply(self) -> list: ...
    def psync(self, client, replid: str, offset: int, failover: bool = False) -> object: ...


WRITE, ALL = 1, 2                    # a pause's modes: the commands that write wait, or every command
PAUSE_MODES = {b"WRITE": WRITE, b"ALL": ALL}


class Pause(Protocol):
    """CLIENT PAUSE and UNPAUSE (daemon/pause.py)."""

    def by_client(self, mode: int, timeout_ms: int) -> None: ...
    def end(self, purpose: str) -> None: ...
    def holds(self, client, route) -> bool: ...


class SlowLog(Protocol):
    """SLOWLOG (daemon/slowlog.py)."""

    def get(self, count: int) -> list: ...
    def __len__(self) -> int: ...
    def reset(self) -> None: ...


class Channels(Protocol):
    def publish(self, channel: bytes, message: bytes) -> int: ...
    def subscribe(self, conn, channel: bytes) -> None: ...
    def unsubscribe(self, conn, channel: bytes) -> None: ...


class Settings(Protocol):
    """The settings handlers read (the daemon's frozen ``Settings``)."""

    auto_create: bool
    max_payload: int
    max_args: int
    enable_debug_command: bool


class Configuration(Protocol):
    """CONFIG GET, SET and REWRITE (daemon/configuration.py)."""

    def items(self) -> list[tuple[str, str]]:
        """CONFIG GET: every setting by name, rendered as text."""

    def set(self, pairs: list[tuple[str, str]]) -> None:
        """CONFIG SET: apply all or none; raises an ``Error`` reply."""

    def rewrite(self) -> None:
        """CONFIG REWRITE: the settings and the role into the config file."""


class DebugClock(Protocol):
    """The daemon's clock as DEBUG CLOCK sees it (docs/semantics.md §3.6)."""

    offset: int
    frozen: bool

    def advance(self, ms: int) -> None: ...
    def freeze(self, at: int) -> None: ...
    def resume(self) -> None: ...


@runtime_checkable
class ServerContext(Protocol):
    store: Store
    settings: Settings
    acl: Acl                         # users and permissions (commands.acl)
    stats: Stats
    clock: DebugClock
    clients: dict[int, "ClientContext"]
    oom: bool                        # maxmemory is exceeded: denyoom commands get -OOM
    loading: bool                    # recovery still runs: commands not flagged loading get -LOADING
    disk_error: OSError | None       # the log cannot be written: write commands get -MISCONF
    faults: Faults                   # DEBUG FAULT: errors the log pretends to get
    metrics: "Metrics"               # command(name, seconds): the duration histogram
    read_only: bool                  # a replica: commands that write get -READONLY
    replicas_gate: int               # min-replicas-to-write on a primary (0: off): -NOREPLICAS below it
    paused: bool                     # a pause is in force: ``pause.holds`` says which commands wait
    pause: "Pause"                   # CLIENT PAUSE, and a shutdown waiting for replicas (daemon/pause.py)
    slowlog: "SlowLog"               # SLOWLOG (daemon/slowlog.py)
    slow_after: float                # a command that ran this many seconds or more goes to the slow log
    replication: "Replication"       # role, REPLICAOF, PSYNC, REPLCONF (daemon/replication.py)
    channels: "Channels"             # plain pub/sub channels (daemon/channels.py)
    history: "History"               # every queue's minutes, QHISTORY (storage/history.py)
    configuration: Configuration     # CONFIG GET, SET, REWRITE (daemon/configuration.py)

    @property
    def auth_required(self) -> bool: ...

    def now_ms(self) -> int:
        """The daemon's time (ms epoch): every job time reads it."""

    def reset_stats(self) -> None: ...

    def info_sections(self) -> dict[str, list[tuple[str, object]]]:
        """INFO: section name -> (field, value) pairs, in order."""

    def blocked_on(self, queue: Queue) -> int:
        """How many claims wait on ``queue`` (QINFO consumers_blocked)."""

    def queue_dropped(self, queue: Queue) -> None:
        """QDROP happened: answer the claims waiting on it, end its streams."""

    def request_shutdown(self, reason: str, force: bool = False, now: bool = False, conn=None) -> bool:
        """SHUTDOWN: stop, once the replicas have everything unless ``now``
        (``conn``, the client that asked, waits meanwhile); False (and
        nothing happens) while stopping would lose queues the disk does not
        hold, unless ``force``."""

    def bgsave(self, schedule: bool) -> str:
        """BGSAVE: start a snapshot; "started", "scheduled" (SCHEDULE while
        one runs) or "running" (one runs already)."""

    def lastsave(self) -> int:
        """LASTSAVE: unix time of the last snapshot written (0: none yet)."""


@runtime_checkable
class Holdings(Protocol):
    """What a connection holds beyond its replies: SESSION leases and work
    streams (the daemon's ``daemon.holdings.Holdings``)."""

    subscriptions: int               # work streams started by SUBSCRIBE (RESP2: the pub/sub context)

    def session(self):
        """The holder of this connection's SESSION leases (``hold(queue, job)``)."""

    def start_work(self, request) -> None:
        """QWORK: keep jobs leased to this connection (``jobs.WorkRequest``)."""

    def stop_work(self, channel: bytes) -> None:
        """UNSUBSCRIBE: end the stream of that channel; its leases go back to ready."""

    def channels(self) -> list[bytes]:
        """The channels of the streams SUBSCRIBE started."""

    def works_through_another_stream(self, queue: bytes, channel: bytes | None) -> bool:
        """Whether a stream of another kind or channel already works ``queue``."""


@runtime_checkable
class ClientContext(Protocol):
    server: ServerContext
    id: int
    addr: str
    laddr: str
    fd: int
    name: bytes | None
    resp3: bool
    authenticated: bool
    user: str                        # the user's name
    acl_user: User                   # what the user may do
    lib_name: str
    lib_ver: str
    multi: list | None               # commands queued since MULTI, or None
    multi_dirty: bool                # a command failed to queue: EXEC aborts
    in_exec: bool                    # running inside EXEC (claims never block)
    last_command: str
    created: float                   # monotonic seconds
    last_active: float
    holdings: "Holdings"             # SESSION leases and work streams

    @property
    def flags(self) -> str: ...
    @property
    def multi_len(self) -> int: ...
    @property
    def query_buffer(self) -> int: ...
    @property
    def output_buffer(self) -> int: ...

    def close_after_reply(self) -> None:
        """QUIT: close once this command's reply is written."""

    def kill(self) -> None:
        """CLIENT KILL: close now."""

    def reset(self) -> None:
        """RESET: release SESSION/QWORK leases, back to a fresh connection."""
