"""Settings: one frozen dataclass, read from defaults < file < env < flags
(``leaseq serve --name value`` for every setting).

Every setting is a field of ``Settings`` whose metadata gives its kind, unit,
whether ``CONFIG SET`` may change it at run time, and one line of help.
The config file uses Redis's syntax (``name value`` per line, ``#`` comments,
quotes for values with spaces); ``user name rule ...`` lines declare users
in Redis's ACL syntax (``commands.acl``) and may repeat; environment variables are ``LEASEQ_<NAME>``
with dashes as underscores (``LEASEQ_FSYNC_INTERVAL=200``).  Sizes accept
Redis units (``1k`` = 1000, ``1kb`` = 1024, ``mb``, ``gb`` ...).
``conf/leaseq.conf`` documents every setting; a test keeps it complete.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from dataclasses import dataclass, field

from leaseq.commands import errors
from leaseq.commands.acl import AclError, check_rules
from leaseq.commands.table import TABLE
from leaseq.storage.config import QueueConfig


class ConfigError(ValueError):
    pass


# the words of shutdown-on-sigterm and shutdown-on-sigint, as Redis's
SHUTDOWN_FLAGS = ("default", "save", "nosave", "now", "force")


def _s(default, kind: str, help: str, mutable: bool = True, choices: tuple = (), lo: int = 0, hi: int | None = None):
    """One setting.  ``lo``/``hi``: the range an integer setting ("int",
    "ms") must be in (``hi`` None: no upper bound)."""
    return field(default=default, metadata={"kind": kind, "help": help, "mutable": mutable, "choices": choices,
                                            "lo": lo, "hi": hi})


PORT_MAX = 65535
MAX_HISTORY_HOURS = 24 * 366


@dataclass(frozen=True, slots=True)
class Settings:
    port: int = _s(6479, "int", "TCP port to listen on (0 picks a free port)", mutable=False, hi=PORT_MAX)
    bind: str = _s("127.0.0.1", "str", "address to listen on; 127.0.0.1 keeps a sidecar private", mutable=False)
    tls_port: int = _s(0, "int", "TLS port for rediss:// clients (0 = no TLS listener); the plain port stays open",
                       mutable=False, hi=PORT_MAX)
    tls_bind: str = _s("", "str", "address the TLS listener binds to (empty: the bind address)", mutable=False)
    tls_cert_file: str = _s("", "str", "the server's certificate (PEM), with any intermediates after it",
                            mutable=False)
    tls_key_file: str = _s("", "str", "the private key of tls-cert-file (PEM, not encrypted)", mutable=False)
    tls_ca_cert_file: str = _s("", "str", "CA certificates (PEM) that client certificates must be signed by",
                               mutable=False)
    tls_auth_clients: str = _s("yes", "choice",
                               "yes: clients must present a certificate signed by tls-ca-cert-file; "
                               "optional: checked if presented; no: not asked for",
                               mutable=False, choices=("yes", "no", "optional"))
    tls_protocols: str = _s("TLSv1.2 TLSv1.3", "str", "TLS versions the TLS listener accepts", mutable=False)
    http_port: int = _s(0, "int", "HTTP port for the status page, /healthz, /readyz and /metrics (0 = none)",
                        mutable=False, hi=PORT_MAX)
    http_bind: str = _s("127.0.0.1", "str", "address the HTTP listener binds to", mutable=False)
    search_slice: int = _s(5000, "int", "jobs the status page's search and bulk actions look at (or act on) per "
                                        "turn of the event loop before other clients get theirs (at least 1)", lo=1)
    dir: str = _s("./data", "str", "data directory (log segments and snapshots); created if missing", mutable=False)
    loglevel: str = _s("info", "choice", "log level", choices=("debug", "info", "warning", "error"))
    requirepass: str = _s("", "str", "password for the default user; empty means no authentication")
    protected_mode: bool = _s(True, "bool", "without a password for the default user, serve only loopback "
                                            "clients; others get -DENIED")
    default_durability: str = _s("fsync", "choice", "DURABILITY of queues that do not set one",
                                 choices=("fsync", "async", "memory"))
    lease_durability: str = _s("async", "choice",
                               "fsync: claims, extends and nacks on fsync queues also wait for fsync",
                               choices=("async", "fsync"))
    fsync_interval: int = _s(1000, "ms", "async queues and lease records: written data is fsynced at least this often (ms)")
    segment_size: int = _s(64 << 20, "bytes", "a new log segment starts when the current one reaches this size")
    snapshot_min_bytes: int = _s(64 << 20, "bytes",
                                 "snapshot when the log since the last one exceeds this and twice the live data")
    archive_dir: str = _s("", "str", "move segments a snapshot lets go here instead of deleting them (empty: delete)")
    auto_create: bool = _s(True, "bool", "QPUSH, QPUSHMANY, QCLAIM and QWORK create missing queues with default options")
    maxclients: int = _s(10000, "int", "connections beyond this are refused with an error")
    timeout: int = _s(0, "int", "close connections idle for this many seconds (0 = never); blocked claimers are not idle")
    tcp_keepalive: int = _s(300, "int", "TCP keepalives on connections idle this many seconds, so that a peer gone "
                                        "without closing (a machine down, a network cut) is noticed (0: off)")
    proto_max_bulk_len: int = _s(512 << 20, "bytes", "largest bulk string a request may carry")
    max_payload: int = _s(16 << 20, "bytes", "largest job payload; larger pushes get -TOOBIG")
    max_args: int = _s(1024 * 1024, "int", "most arguments one command may have")
    client_output_buffer_limit: int = _s(
        64 << 20, "bytes", "a client whose unread replies exceed this is disconnected (0 = no limit)")
    maxmemory: int = _s(0, "bytes", "when the process's resident memory exceeds this, QPUSH, QPUSHMANY and QCREATE get -OOM (0 = no limit)")
    enable_debug_command: bool = _s(False, "bool", "allow DEBUG (moves the daemon's clock; for tests only)",
                                    mutable=False)
    replicaof: str = _s("", "str", "follow the primary at \"host port\" as its replica (empty: a primary); "
                                   "REPLICAOF changes it at run time", mutable=False)
    masteruser: str = _s("", "str", "the user a replica authenticates as with its primary (empty: default)")
    masterauth: str = _s("", "str", "the password a replica authenticates with to its primary")
    repl_backlog_size: int = _s(64 << 20, "bytes",
                                "how much of the replication stream a primary keeps for replicas that reconnect")
    repl_timeout: int = _s(60, "int", "a primary drops a replica that has acknowledged nothing for this many "
                                      "seconds (replicas acknowledge every second), and a replica its link to a "
                                      "primary it heard nothing from (0: never); above repl-ping-replica-period")
    repl_ping_replica_period: int = _s(10, "int", "a primary whose replication stream carried nothing for this many "
                                                  "seconds sends its replicas a PING record (at least 1)", lo=1)
    replica_priority: int = _s(100, "int", "Sentinel promotes the replica with the lowest; 0: never")
    replica_announce_ip: str = _s("", "str", "the address a replica tells its primary (and Sentinel) it is at")
    replica_announce_port: int = _s(0, "int", "the port a replica tells its primary it listens on (0: its port)",
                                hi=PORT_MAX)
    min_replicas_to_write: int = _s(0, "int", "a primary refuses writes with -NOREPLICAS while fewer replicas "
                                              "than this acknowledged within min-replicas-max-lag (0: never)")
    min_replicas_max_lag: int = _s(10, "int", "seconds since its last acknowledgement within which a replica counts "
                                              "for min-replicas-to-write (0: the check is off)")
    min_replicas_to_ack: int = _s(0, "int", "a reply that waits for the log's fsync also waits until this many "
                                            "replicas have the record on their disks (0: the primary's alone)")
    shutdown_timeout: int = _s(10, "int", "seconds a shutdown (SHUTDOWN, SIGTERM, SIGINT) waits for the replicas to "
                                          "acknowledge everything, writes paused meanwhile (0: it does not wait)")
    shutdown_on_sigterm: str = _s("default", "flags", "what SIGTERM's shutdown does, as SHUTDOWN's modifiers: now "
                                                      "(no wait for the replicas), force (stop even while the data "
                                                      "directory is put back); save, nosave: no change",
                                  choices=SHUTDOWN_FLAGS)
    shutdown_on_sigint: str = _s("default", "flags", "the same for SIGINT", choices=SHUTDOWN_FLAGS)
    slowlog_log_slower_than: int = _s(10_000, "int", "microseconds a command's run must take to be kept in the "
                                                     "slow log (SLOWLOG; 0: every command, negative: none)",
                                      lo=-(1 << 62))
    slowlog_max_len: int = _s(128, "int", "entries the slow log keeps, the newest (SLOWLOG)")
    history_hours: int = _s(72, "int", "hours of per-minute history kept per queue (QHISTORY, the status page's "
                                        "charts) in the data directory's history/ folder (0: off)",
                           hi=MAX_HISTORY_HOURS)
    # ``user`` lines of the config file, each as its words (name, rules...);
    # not a setting CONFIG GET shows, as in Redis
    users: tuple = field(default=())

    # -- access by setting name ------------------------------------------------------

    def get(self, name: str):
        return getattr(self, attr_name(name))

    def replace(self, **changes) -> "Settings":
        return dataclasses.replace(self, **changes)


FIELDS = {f.name.replace("_", "-"): f for f in dataclasses.fields(Settings) if "kind" in f.metadata}


# Redis settings that tools ask for with CONFIG GET (redis-benchmark: save
# and appendonly; redis-cli: databases; --hotkeys: maxmemory-policy), shown
# as what leaseq does; CONFIG SET refuses them as immutable.
_APPENDFSYNC = {"fsync": "always", "async": "everysec", "memory": "no"}


def redis_views(settings: "Settings") -> list[tuple[str, str]]:
    return [
        ("save", ""),                               # no timed saves: snapshots follow the log's size
        ("appendonly", "yes"),                      # every change goes to the write-ahead log
        ("appendfsync", _APPENDFSYNC[settings.default_durability]),
        ("databases", "1"),
        ("maxmemory-policy", "noeviction"),         # jobs are never evicted; pushes get -OOM
    ]


REDIS_VIEWS = frozenset(name for name, _ in redis_views(Settings()))


def items(settings: "Settings") -> list[tuple[str, str]]:
    """CONFIG GET: every setting by name, rendered as text, then Redis's views."""
    return [(name, render(name, settings.get(name))) for name in FIELDS] + redis_views(settings)


def apply_set(settings: "Settings", pairs: list[tuple[str, str]]) -> tuple["Settings", dict]:
    """CONFIG SET, all or none: ``settings`` with every ``(name, text)`` of
    ``pairs`` applied, and the changes by attribute name.  The first pair
    refused raises its reply from ``commands.errors``: a Redis view or a
    setting fixed at start (immutable), an unknown name, a value that does
    not parse (invalid)."""
    changes = {}
    for name, text in pairs:
        f = FIELDS.get(name)
        if name in REDIS_VIEWS:
            raise errors.config_immutable(name)
        if f is None:
            raise errors.config_unknown(name)
        if not f.metadata["mutable"]:
            raise errors.config_immutable(name)
        try:
            changes[attr_name(name)] = parse_value(name, text)
        except ConfigError as e:
            raise errors.config_invalid(name, str(e)) from None
    return settings.replace(**changes), changes


def copy_to_storage(settings: "Settings", store, datadir) -> None:
    """The settings the store, the data directory and its log hold copies of
    (at ``attach``, after CONFIG SET, when a disk fault's recovery hands over
    a new store or log)."""
    datadir.lease_sync = store.journal.lease_sync = settings.lease_durability == "fsync"
    datadir.segment_size = settings.segment_size
    datadir.archive_dir = settings.archive_dir
    store.default_config = QueueConfig(durability=settings.default_durability)
    history = datadir.history
    history.hours = settings.history_hours
    if store.journal.log is not None:
        store.journal.history = history.hook()
    if datadir.wal is not None:
        datadir.wal.set_segment_size(settings.segment_size)


def attr_name(name: str) -> str:
    return name.lower().replace("-", "_")


def render(name: str, value) -> str:
    kind = FIELDS[name].metadata["kind"]
    if kind == "bool":
        return "yes" if value else "no"
    return str(value)


_SIZES = (("gb", 1024 ** 3), ("mb", 1024 ** 2), ("kb", 1024))


def file_text(name: str, value) -> str:
    """``value`` as a config file line would write it (what ``parse_value``
    reads back): yes/no, sizes in the largest unit that divides them
    (``64mb``), empty or spaced strings quoted."""
    kind = FIELDS[name].metadata["kind"]
    if kind == "bytes" and value:
        for unit, size in _SIZES:
            if value % size == 0:
                return f"{value // size}{unit}"
    text = render(name, value)
    return f'"{text}"' if text == "" or " " in text else text



_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000 ** 2, "mb": 1024 ** 2, "g": 1000 ** 3, "gb": 1024 ** 3}


def parse_value(name: str, text: str):
    """Convert a setting's text to its value; raise ConfigError naming the setting."""
    f = FIELDS.get(name)
    if f is None:
        raise ConfigError(f"unknown setting '{name}'")
    meta = f.metadata
    kind = meta["kind"]
    t = text.strip()
    if kind == "bool":
        if t.lower() in ("yes", "true", "1"):
            return True
        if t.lower() in ("no", "false", "0"):
            return False
        raise ConfigError(f"'{name}' must be yes or no, not '{text}'")
    if kind == "choice":
        if t.lower() not in meta["choices"]:
            raise ConfigError(f"'{name}' must be one of {', '.join(meta['choices'])}, not '{text}'")
        return t.lower()
    if kind == "flags":
        return _flags(name, t, meta["choices"])
    if kind in ("int", "ms"):
        try:
            v = int(t)
        except ValueError:
            raise ConfigError(f"'{name}' must be an integer, not '{text}'") from None
        if v < meta["lo"] or (meta["hi"] is not None and v > meta["hi"]):
            raise ConfigError(f"'{name}' is out of range: {v}")
        return v
    if kind == "bytes":
        low = t.lower()
        digits = low.rstrip("kmgb")
        unit = low[len(digits):]
        if not digits.isdigit() or unit not in _UNITS:
            raise ConfigError(f"'{name}' must be a size such as 64mb, not '{text}'")
        return int(digits) * _UNITS[unit]
    return text


def _flags(name: str, text: str, choices: tuple) -> str:
    """Words of ``choices`` (the first, ``default``, means none of the
    others), as Redis's multi-word settings: kept in ``choices``' order,
    space-separated; ``save`` and ``nosave`` exclude each other."""
    words = set(text.lower().split())
    if not words or not words <= set(choices):
        raise ConfigError(f"'{name}' must be words of {', '.join(choices)}, not '{text}'")
    if {"save", "nosave"} <= words:
        raise ConfigError(f"'{name}' can't have both 'save' and 'nosave'")
    return " ".join(c for c in choices[1:] if c in words) or choices[0]


def read_file(path: str) -> dict:
    """``name value`` lines → {name: value}; errors name file, line and setting."""
    values: dict = {}
    users = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        # a user line keeps '#': there it starts a password hash, not a comment
        is_user = stripped.split(None, 1)[0].lower() == "user"
        try:
            parts = shlex.split(stripped, comments=not is_user)
        except ValueError as e:
            raise ConfigError(f"{path}:{number}: {e}") from None
        if not parts:
            continue
        name = parts[0].lower()
        if is_user:
            users.append(_user_line(parts[1:], users, f"{path}:{number}"))
            continue
        if len(parts) == 1:
            parts.append("")
        if name == "replicaof" and len(parts) == 3:      # Redis writes it as two words: replicaof host port
            parts = [name, f"{parts[1]} {parts[2]}"]
        elif name in FIELDS and FIELDS[name].metadata["kind"] == "flags":    # and these as words: now force
            parts = [name, " ".join(parts[1:])]
        if len(parts) != 2:
            raise ConfigError(f"{path}:{number}: '{name}' takes one value, got {len(parts) - 1}")
        try:
            values[attr_name(name)] = parse_value(name, parts[1])
        except ConfigError as e:
            raise ConfigError(f"{path}:{number}: {e}") from None
    if users:
        values["users"] = tuple(users)
    return values


def _user_line(words: list[str], earlier: list, where: str) -> tuple:
    """A ``user`` line's words, once its rules are known to apply."""
    if words and any(u[0] == words[0] for u in earlier):
        raise ConfigError(f"{where}: Duplicate user '{words[0]}' found")
    try:
        check_rules(words, TABLE)
    except AclError as e:
        raise ConfigError(f"{where}: {e}") from None
    return tuple(words)


def read_env(environ=os.environ) -> dict:
    values = {}
    for name in FIELDS:
        var = "LEASEQ_" + name.upper().replace("-", "_")
        if var in environ:
            try:
                values[attr_name(name)] = parse_value(name, environ[var])
            except ConfigError as e:
                raise ConfigError(f"environment variable {var}: {e}") from None
    return values


def read_flags(texts: dict) -> dict:
    """``leaseq serve --name value`` flags, {setting name: text or None} ->
    {attribute: value} for those given, parsed as the file's values are."""
    values = {}
    for name, text in texts.items():
        if text is not None:
            try:
                values[attr_name(name)] = parse_value(name, text)
            except ConfigError as e:
                raise ConfigError(f"option --{name}: {e}") from None
    return values


def load(config_file: str | None = None, flags: dict | None = None, environ=os.environ) -> Settings:
    """Defaults, then the file, then ``LEASEQ_*`` variables, then flags;
    then the TLS files, when tls-port is set (``tls.server_context``)."""
    values: dict = {}
    if config_file:
        values.update(read_file(config_file))
    values.update(read_env(environ))
    values.update({k: v for k, v in (flags or {}).items() if v is not None})
    settings = Settings(**values)
    if settings.replicaof:
        primary_address(settings.replicaof)          # "host port", or the error naming the setting
    if settings.tls_port:
        # the certificate, key and CA must load before anything starts, as a bad value is refused
        from .tls import server_context
        server_context(settings)
    return settings


def primary_address(text: str) -> tuple[str, int]:
    """``replicaof``'s "host port" as (host, port); ConfigError when it is not."""
    words = text.split()
    if len(words) != 2 or not words[1].isdigit() or not 0 < int(words[1]) <= 65535:
        raise ConfigError(f"'replicaof' must be \"host port\", not '{text}'")
    return words[0], int(words[1])


def rewrite(path: str, settings: "Settings", replicaof: str) -> None:
    """CONFIG REWRITE: the file at ``path`` keeps its lines, comments and
    order; a setting set there gets its value now (a second line for it is
    dropped), a setting not there is added at the end when its value is not
    its default, and ``replicaof`` says the role now (``host port``; its
    line goes on a primary).  Written to a temporary file, fsynced and
    renamed over the old one, so a crash leaves one or the other whole."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    now = {name: file_text(name, settings.get(name)) for name in FIELDS}
    now["replicaof"] = replicaof
    seen: set = set()
    out = []
    for line in lines:
        words = line.split(None, 1)
        name = words[0].lower() if words and not words[0].startswith("#") else ""
        if name in FIELDS:
            if name not in seen and now[name]:
                out.append(f"{name} {now[name]}")
            elif name not in seen and name != "replicaof":
                out.append(f"{name} {now[name]}")
            seen.add(name)
            continue
        out.append(line)
    added = [f"{name} {now[name]}" for name, f in FIELDS.items()
             if name not in seen and (now[name] if name == "replicaof" else settings.get(name) != f.default)]
    if added:
        out += ["", "# Generated by CONFIG REWRITE"] + added
    temporary = f"{path}.rewrite.tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
