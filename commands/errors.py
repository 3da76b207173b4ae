"""Every error leaseq replies with, in one place.

Errors are API: clients map the code word (first word) to exception classes,
and some (ioredis, coredis) match Redis's exact wording for unknown commands
and wrong arity, so those sentences are copied from Redis verbatim.  Codes
that clients already give a meaning (LOADING, READONLY, NOAUTH, WRONGPASS,
NOPERM, MOVED, NOGROUP, WRONGTYPE, ...) are used only with that meaning.

``docs/errors.md`` lists the codes; a test keeps it in step with ``CODES``.
"""

from __future__ import annotations

from .replies import Error

# code -> what it means (documentation and the docs test read this table)
CODES = {
    "ERR": "generic error: bad arguments, syntax, unknown command, protocol error",
    "NOQUEUE": "the queue does not exist (and the command does not create queues)",
    "EXISTS": "QCREATE of an existing queue with a different configuration",
    "FULL": "the queue holds MAXLEN live jobs; nothing was pushed",
    "TOOBIG": "a payload is larger than the max-payload setting",
    "NOTEMPTY": "QDROP of a queue that still has jobs, without FORCE",
    "EXECABORT": "EXEC refused because a command failed to queue",
    "NOPROTO": "HELLO asked for a protocol version other than 2 or 3",
    "NOAUTH": "authentication is required first",
    "WRONGPASS": "wrong user name or password",
    "NOPERM": "the user may not run this command, or not on this queue",
    "OOM": "maxmemory is exceeded; pushes are refused",
    "CLOSED": "the queue was dropped while the command was waiting on it",
    "LOADING": "the daemon is still recovering its data directory; retry shortly",
    "MISCONF": "the log cannot be written (disk full or failing): changes are refused, reads go on",
    "DENIED": "protected mode: no password is set, so only loopback clients are served",
    "NOJOB": "QRESULT of a job the queue does not know, whose result expired, or that was acked without one",
    "DEAD": "QRESULT of a job that died or was cancelled; the reason follows",
    "READONLY": "a replica: commands that write, claim or stream jobs go to its primary",
    "NOMASTERLINK": "PSYNC to a replica whose own link to its primary is down, or to a node failing over",
    "NOREPLICAS": "min-replicas-to-write: fewer replicas than that acknowledged lately; changes are refused",
}


def err(message: str) -> Error:
    return Error("ERR", message)


# -- generic (Redis wording) -------------------------------------------------

SYNTAX = err("syntax error")
NOT_INTEGER = err("value is not an integer or out of range")
DB_RANGE = err("DB index is out of range")
NESTED_MULTI = err("MULTI calls can not be nested")
EXEC_WITHOUT_MULTI = err("EXEC without MULTI")
DISCARD_WITHOUT_MULTI = err("DISCARD without MULTI")
EXECABORT = Error("EXECABORT", "Transaction discarded because of previous errors.")
WATCH_UNSUPPORTED = err("WATCH is not supported by leaseq; MULTI/EXEC is always atomic")
NOPROTO = Error("NOPROTO", "unsupported protocol version")
NOAUTH = Error("NOAUTH", "Authentication required.")
WRONGPASS = Error("WRONGPASS", "invalid username-password pair or user is disabled.")
AUTH_NOT_CONFIGURED = err(
    "AUTH <password> called without any password configured for the default user. "
    "Are you sure your configuration is correct?"
)
BAD_CLIENT_NAME = err("Client names cannot contain spaces, newlines or special characters.")
NO_SUCH_CLIENT = err("No such client")
OOM = Error("OOM", "command not allowed when used memory > 'maxmemory'.")
INTERNAL = err("internal error while running the command; see the server log")
HELLO_PROTOVER = err("Protocol version is not an integer or out of range")
HELLO_NOAUTH = Error("NOAUTH", "HELLO must be called with the client already authenticated, otherwise the "
                               "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client "
                               "and select the RESP protocol version at the same time")
NO_KEY_ARGUMENTS = err("The command has no key arguments")
MAX_CLIENTS = err("max number of clients reached")
BGSAVE_RUNNING = err("Background save already in progress")
LOADING = Error("LOADING", "leaseq is loading the dataset in memory")
READONLY = Error("READONLY", "You can't write against a read only replica.")     # Redis's words, as clients match them
NOMASTERLINK = Error("NOMASTERLINK", "Can't SYNC while not connected with my master")
NOREPLICAS = Error("NOREPLICAS", "Not enough good replicas to write.")
WAIT_ON_REPLICA = err("WAIT cannot be used with replica instances.")
WAITAOF_ON_REPLICA = err("WAITAOF cannot be used with replica instances. Please also note that writes to replicas "
                         "are just local and are not propagated.")
NUMLOCAL_RANGE = err("value is out of range, value must between 0 and 1")      # (Redis's words, its grammar too)
NOT_POSITIVE = err("value is out of range, must be positive")
SLOWLOG_COUNT = err("count should be greater than or equal to -1")
NEGATIVE_TIMEOUT = err("timeout is negative")          # (Redis's words for WAIT)
TIMEOUT_NOT_INTEGER = err("timeout is not an integer or out of range")   # (and for CLIENT PAUSE)
PAUSE_MODE = err("CLIENT PAUSE mode must be WRITE or ALL")
INVALID_PORT = err("Invalid master port")
REPLICAOF_FROM_REPLICA = err("Command is not valid when client is a replica.")


def unknown_client_type(kind: bytes) -> Error:
    return err(f"Unknown client type '{kind.decode(errors='replace')}'")


def unrecognized_replconf(option: bytes) -> Error:
    return err(f"Unrecognized REPLCONF option: {option.decode(errors='replace')}")
# the opening is Redis's, which clients and operators recognise; the advice names leaseq's settings
DENIED = Error(
    "DENIED",
    "leaseq is running in protected mode because protected mode is enabled and no password is set for the "
    "default user. Only clients on the loopback interface are served until one of these is done: "
    "1) give the default user a password (requirepass or a 'user default' line in the config file, "
    "LEASEQ_REQUIREPASS, or CONFIG SET requirepass from the loopback interface); "
    "2) turn protected mode off (protected-mode no in the config file, LEASEQ_PROTECTED_MODE=no, or "
    "CONFIG SET protected-mode no from the loopback interface), and make sure the port is not reachable "
    "from the internet. "
    "If no other host should reach leaseq, bind 127.0.0.1 instead.")


def misconf(error: OSError) -> Error:
    reason = error.strerror or str(error)
    return Error("MISCONF", f"leaseq cannot write its log ({reason}): commands that change queues are refused "
                            f"until it can, reads keep working; see the server log")


def misconf_unseen(error: OSError) -> Error:
    """A read answered while a change it may show waited for the log, which then refused it."""
    reason = error.strerror or str(error)
    return Error("MISCONF", f"leaseq cannot write its log ({reason}): this reply may have shown a change that "
                            f"was refused, so it is not sent; reads keep working, ask again")


def unknown_command(name: bytes, args: list[bytes]) -> Error:
    shown = "".join(f"'{_show(a)}' " for a in args[:8])   # Redis leaves a space after each
    return err(f"unknown command '{_show(name)}', with args beginning with: {shown}")


def unknown_subcommand(sub: bytes, cmd: str) -> Error:
    return err(f"unknown subcommand '{_show(sub)}'. Try {cmd.upper()} HELP.")


def noperm_command(user: str, command: str) -> Error:
    return Error("NOPERM", f"User {user} has no permissions to run the '{command}' command")


def noperm_queue(user: str, queue: bytes) -> Error:
    return Error("NOPERM", f"User {user} has no permissions to access the '{_show(queue)}' queue")


def unknown_category(name: bytes) -> Error:
    return err(f"Unknown category '{_show(name)}'")


BAD_WORK_CHANNEL = err('a work stream\'s channel is "QWORK <queue> <consumer> [MAX n] [LEASE ms]"')


def stream_conflict(queue: bytes) -> Error:
    return err(f"this connection already has a work stream on queue '{_show(queue)}'; UNSUBSCRIBE it first")


def qwork_unreadable(library: str) -> Error:
    return err(f"{library} does not deliver QWORK's push messages; SUBSCRIBE \"QWORK <queue> <consumer> [MAX n] "
               f"[LEASE ms]\" streams the same jobs as pub/sub messages it does deliver")


def pubsub_context(command: str) -> Error:
    return err(f"Can't execute '{command}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are "
               f"allowed in this context")


def wrong_arity(name: str) -> Error:
    return err(f"wrong number of arguments for '{name.lower()}' command")


def not_allowed_in_multi(name: str) -> Error:
    return err(f"Command not allowed inside a transaction: '{name.lower()}'")


def out_of_range(what: str, low: int, high: int) -> Error:
    return err(f"{what} must be between {low} and {high}")


def subcommand_arity(cmd: str, sub: bytes) -> Error:
    return err(f"wrong number of arguments for '{cmd}|{_show(sub.lower())}' command")


def hello_syntax(option: bytes) -> Error:
    return err(f"Syntax error in HELLO option '{_show(option)}'")


def setinfo_value(attr: bytes) -> Error:
    return err(f"{_show(attr)} cannot contain spaces, newlines or special characters.")


def unrecognized_option(option: bytes) -> Error:
    return err(f"Unrecognized option '{_show(option)}'")


def config_unknown(name: str) -> Error:
    return err(f"Unknown option or number of arguments for CONFIG SET - '{name}'")


def config_invalid(name: str, reason: str) -> Error:
    return err(f"CONFIG SET failed (possibly related to argument '{name}') - {reason}")


def config_immutable(name: str) -> Error:
    return err(f"CONFIG SET failed (possibly related to argument '{name}') - can't set immutable config")


# -- leaseq's own wording, code ERR ----------------------------------------------

SHUTTING_DOWN = err("leaseq is shutting down")
DELAY_AND_DEAD = err("DELAY and DEAD cannot be combined")
BAD_SCOPE = err("WHILE must be queued, active or exists")
BAD_STATE = err("STATE must be delayed, ready, in_flight, dead, completed, waiting or cancelled")
BAD_DURABILITY = err("DURABILITY must be fsync, async or memory")
BACKOFF_EXPONENT = err("BACKOFF exponent must be between 0 and 10")
INVALID_CURSOR = err("invalid cursor")
CLOCK_BACKWARDS = err("the clock only moves forward")
DEBUG_NOT_ALLOWED = err(
    "DEBUG command not allowed. If the enable-debug-command option is set to \"no\", set it to \"yes\" "
    "in the configuration file (or LEASEQ_ENABLE_DEBUG_COMMAND=yes) and restart the server.")
FILTERBY_UNSUPPORTED = err("COMMAND LIST FILTERBY is not supported by leaseq")
NO_CONFIG_FILE = err("The server is running without a config file")


def rewrite_failed(error: OSError) -> Error:
    return err(f"Rewriting config file: {error.strerror or error}")
NO_SHUTDOWN = err("No shutdown in progress.")              # (Redis's words for SHUTDOWN ABORT)
# FAILOVER (daemon/failover.py), in Redis's words and order of checks
NO_FAILOVER = err("No failover in progress.")
FAILOVER_TIMEOUT = err("FAILOVER timeout must be greater than 0")
FAILOVER_RUNNING = err("FAILOVER already in progress.")
FAILOVER_ON_REPLICA = err("FAILOVER is not valid when server is a replica.")
FAILOVER_NO_REPLICAS = err("FAILOVER requires connected replicas.")
FAILOVER_FORCE = err("FAILOVER with force option requires both a timeout and target HOST and IP.")
FAILOVER_NOT_REPLICA = err("FAILOVER target HOST and PORT is not a replica.")
FAILOVER_NOT_ONLINE = err("FAILOVER target replica is not online.")
FAILOVER_REPLID = err("PSYNC FAILOVER replid must match my replid.")
REPLICAOF_FAILING_OVER = err("REPLICAOF not allowed while failing over.")
SYNC_WHILE_FAILING_OVER = Error("NOMASTERLINK", "Can't SYNC while failing over")
SHUTDOWN_FAILED = err("Errors trying to SHUTDOWN. Check logs.")


def not_a_float(option: str) -> Error:
    return err(f"{option} is not a valid float")


def pattern_too_long(limit: int) -> Error:
    return err(f"a MATCH, META or ERROR pattern is at most {limit} bytes")


def key_too_long(limit: int) -> Error:
    return err(f"KEY is longer than {limit} bytes")


REPLACE_WITHOUT_KEY = err("REPLACE goes with KEY or KEYS")
BAD_ONFAIL = err("ONFAIL must be run or fail")
ONFAIL_WITHOUT_AFTER = err("ONFAIL goes with AFTER")
BAD_MISFIRE = err("MISFIRE must be skip, once or all")
BAD_OVERLAP = err("OVERLAP must be allow or skip")
CRON_OR_EVERY = err("QSCHEDULE needs CRON expr or EVERY ms (one of them)")
TZ_WITHOUT_CRON = err("TZ goes with CRON")


def bad_schedule(reason: str) -> Error:
    return err(reason)


def bad_schedule_name(limit: int) -> Error:
    return err(f"schedule name must be 1 to {limit} bytes")


RESULT_ONE_TOKEN = err("RESULT goes with exactly one token")


def progress_too_long(size: int, limit: int) -> Error:
    return err(f"progress of {size} bytes is more than {limit}")


def group_too_long(limit: int) -> Error:
    return err(f"GROUP is longer than {limit} bytes")


META_EMPTY = err("META needs at least one field and its value")
META_ODD = err("META takes field value pairs to the end of the command: a field has no value")


def meta_too_many(count: int, limit: int) -> Error:
    return err(f"META has {count} fields, more than {limit}")


def meta_bad_name(size: int, limit: int) -> Error:
    return err(f"META field name of {size} bytes: a field name is 1 to {limit} bytes")


def meta_repeated(name: bytes) -> Error:
    return err(f"META names field '{name.decode(errors='replace')}' twice")


def meta_too_big(size: int, limit: int) -> Error:
    return err(f"META of {size} bytes (field names and values together) is more than {limit}")


def bad_consumer(limit: int) -> Error:
    return err(f"consumer name must be 1-{limit} bytes")


# -- leaseq's own codes ------------------------------------------------------

def no_job(name: bytes, jid: int, why: str = "is unknown or its result expired") -> Error:
    return Error("NOJOB", f"job {jid} of queue '{_show(name)}' {why}")


def job_dead(reason: bytes) -> Error:
    return Error("DEAD", reason.decode(errors="replace"))


def no_queue(name: bytes) -> Error:
    return Error("NOQUEUE", f"no such queue '{_show(name)}'")


def queue_exists(name: bytes) -> Error:
    return Error("EXISTS", f"queue '{_show(name)}' exists with another configuration")


def queue_full(name: bytes, maxlen: int) -> Error:
    return Error("FULL", f"queue '{_show(name)}' is at MAXLEN ({maxlen} live jobs)")


def too_big(size: int, limit: int) -> Error:
    return Error("TOOBIG", f"payload of {size} bytes exceeds max-payload ({limit} bytes)")


def not_empty(name: bytes, jobs: int) -> Error:
    return Error("NOTEMPTY", f"queue '{_show(name)}' has {jobs} jobs; use QDROP {_show(name)} FORCE")


def queue_dropped(name: bytes) -> Error:
    return Error("CLOSED", f"queue '{_show(name)}' was dropped while waiting")


def bad_queue_name(name: bytes) -> Error:
    return err(f"invalid queue name '{_show(name)}': 1-200 bytes of printable ASCII without spaces")


def durability_change(name: bytes) -> Error:
    return err(f"DURABILITY of queue '{_show(name)}' cannot change between memory and fsync/async")


def deadletter_self(name: bytes) -> Error:
    return err(f"DEADLETTER of queue '{_show(name)}' must be another queue")


# -- protocol errors: the reply is "-ERR Protocol error: <sentence>", then the
# connection closes (daemon.resp raises them, daemon.connection answers) ----------

PROTO_TOO_BIG_REQUEST = "too big request (client query buffer limit)"
PROTO_TOO_BIG_INLINE = "too big inline request"
PROTO_EXPECTED_DOLLAR = "expected '$', got something else"
PROTO_EXPECTED_STAR = "expected '*', got something else"
PROTO_MULTIBULK_LENGTH = "invalid multibulk length"
PROTO_BULK_LENGTH = "invalid bulk length"
PROTO_UNBALANCED_QUOTES = "unbalanced quotes in request"


def proto_expected_dollar_got(got: str) -> str:
    return f"expected '$', got '{got}'"


def protocol_error(sentence: str) -> Error:
    return err(f"Protocol error: {sentence}")


def _show(b: bytes) -> str:
    """Bytes as Redis shows them in messages (invalid UTF-8 replaced, cut at 128)."""
    text = b.decode("utf-8", "replace") if isinstance(b, (bytes, bytearray)) else str(b)
    return text if len(text) <= 128 else text[:128] + "..."
