"""``daemon.dispatch.execute`` with no socket: what every command yields (its
reply and its log ticket), the checks the dispatcher makes once for every
command, and the handler context (commands.context) that both the daemon
and tests/unit/core.py implement."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re

import pytest
from core import PARKED, T0, Client, Core, call, run

from leaseq.commands.context import ClientContext, Holdings, ServerContext
from leaseq.commands.claims import ClaimWait
from leaseq.commands.replies import Error
from leaseq.commands.table import TABLE
from leaseq.daemon import config, dispatch
from leaseq.daemon.connection import Connection
from leaseq.daemon.dispatch import execute
from leaseq.daemon.server import Server
from leaseq.storage import records
from leaseq.storage.journal import Journal
from leaseq.storage.recovery import Replayer
from leaseq.storage.store import Store
from leaseq.storage.wal import MemoryLog, Ticket


@pytest.fixture
def core():
    return Core()


@pytest.fixture
def c(core):
    return Client(core)


def settle(core) -> None:
    """Write and fsync what the log holds, so that the next command's ticket
    is its own records' alone (a read waits for what is on its way)."""
    core.store.journal.log.flush_and_sync()


def logged(core) -> list[int]:
    """Types of the records the core's log holds, in order (flushed first)."""
    log = core.store.journal.log
    log.flush()
    return [t for t, _ in log.records()]


# -- the handler context ---------------------------------------------------------------------------

def test_the_test_core_fits_the_handler_context(core, c):
    assert isinstance(core, ServerContext)
    assert isinstance(c, ClientContext)
    assert isinstance(c.holdings, Holdings)


def test_the_daemon_fits_the_handler_context(tmp_path, core):
    server = Server(config.Settings(dir=str(tmp_path / "data")))     # loading: not attached yet
    assert isinstance(server, ServerContext)
    conn = Connection(server)
    assert isinstance(conn, ClientContext)
    assert isinstance(conn.holdings, Holdings)
    assert server.loading


ROOT = pathlib.Path(__file__).resolve().parents[2]

# The one table of arrows: each room (a top-level source folder, installed as
# ``leaseq.<room>``) and the rooms it may import.  docs/architecture.md says
# the same in words.
ARROWS = {
    "storage": set(),                        # remembers; knows none of the others
    "commands": {"storage"},                 # handlers reach the daemon only through the context
    "daemon": {"commands", "storage"},
    "pipeline": {"storage"},                 # the log's format, never the daemon
    "client": set(),                         # speaks to the daemon over the wire only
    "bench": {"pipeline", "client"},         # starts daemons as processes; `bench spark` drives the sink, `bench lifecycle` a Worker
    "cli": {"daemon", "commands", "storage", "pipeline", "bench"},   # runs each of them
}

# files allowed more than their room: `bench path` runs a server in its own process, `bench history`
# times the history's hook on a journal in its own
BEYOND_THEIR_ROOM = {"bench/path.py": {"daemon", "storage"},
                     "bench/history.py": {"storage"}}   # times the history's hook in its own process


def imports_of(path: pathlib.Path, package: str) -> set[str]:
    """Every module ``path`` imports, absolute; relative imports are resolved
    against ``package`` (the dotted package ``path`` lives in)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base == "leaseq":             # from leaseq import storage
                found.update(f"leaseq.{a.name}" for a in node.names)
            else:
                found.add(base)
    return found


# Cython's imports: ``from X cimport a``, ``cimport X``, ``from X import a``,
# ``import X`` (at any indentation), and ``include "file"``, whose text counts
# as the including file's
CYTHON_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+c?import\b|c?import[ \t]+([\w.]+))", re.M)
CYTHON_INCLUDE = re.compile(r'^[ \t]*include[ \t]+"([^"]+)"', re.M)
# a module loaded by name: flavour.compiled_twin("leaseq.storage._job")
TWIN = re.compile(r'compiled_twin\("([\w.]+)"\)')
SOURCES = ("*.py", "*.pyx", "*.pxd", "*.pxi")


def cython_imports_of(path: pathlib.Path) -> set[str]:
    """Every module a .pyx, .pxd or .pxi file imports or cimports, with
    those of the files it includes (Cython's imports are absolute)."""
    text = path.read_text(encoding="utf-8")
    found = {a or b for a, b in CYTHON_IMPORT.findall(text)}
    for included in CYTHON_INCLUDE.findall(text):
        found |= cython_imports_of((path.parent / included).resolve())
    return found


def module_imports(path: pathlib.Path, package: str) -> set[str]:
    """What ``path`` imports, whatever its kind; a .py file's also counts the
    compiled twins it loads by name."""
    if path.suffix == ".py":
        return imports_of(path, package) | set(TWIN.findall(path.read_text(encoding="utf-8")))
    return cython_imports_of(path)


def rooms_imported(room: str) -> dict[str, set[str]]:
    """{file: the other rooms it imports} for every source file under
    ``room``: .py, and Cython's .pyx, .pxd and .pxi."""
    out = {}
    for path in sorted(p for pattern in SOURCES for p in (ROOT / room).rglob(pattern)):
        package = ".".join(["leaseq", room, *path.relative_to(ROOT / room).parent.parts])
        others = {m.split(".")[1] for m in module_imports(path, package)
                  if m.startswith("leaseq.") and m.split(".")[1] != room}
        out[str(path.relative_to(ROOT))] = others
    return out


def import_graph(rooms=("daemon", "commands", "storage")) -> dict[str, set[str]]:
    """{module: the leaseq modules it imports}, a module being a .py or .pyx
    file with its .pxd (imports inside functions count: they close a cycle
    as surely, only later)."""
    graph: dict[str, set[str]] = {}
    for room in rooms:
        for path in sorted(p for pattern in ("*.py", "*.pyx") for p in (ROOT / room).glob(pattern)):
            name = f"leaseq.{room}.{path.stem}"
            found = module_imports(path, f"leaseq.{room}")
            if path.with_suffix(".pxd").is_file():
                found |= cython_imports_of(path.with_suffix(".pxd"))
            graph.setdefault(name, set()).update(m for m in found if m.startswith("leaseq.") and m != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that import each other round a cycle, each group sorted
    (the strongly connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_every_source_folder_has_a_row_in_the_arrows_table():
    folders = {p.parent.relative_to(ROOT).parts[0] for p in ROOT.glob("*/**/*.py")
               if p.relative_to(ROOT).parts[0] not in ("tests", ".venv", "build")
               and not p.relative_to(ROOT).parts[0].startswith(".")}
    assert folders == set(ARROWS), f"rooms without a row: {folders - set(ARROWS)}; rows without a room: " \
                                   f"{set(ARROWS) - folders}"


def test_imports_of_resolves_relative_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from . import config\nfrom .server import serve\nfrom ..storage.wal import X\n"
                 "from leaseq import pipeline\nimport leaseq.bench.spark\n")
    assert imports_of(f, "leaseq.daemon") == {"leaseq.daemon", "leaseq.daemon.server", "leaseq.storage.wal",
                                              "leaseq.pipeline", "leaseq.bench.spark"}


@pytest.mark.parametrize("room", sorted(ARROWS))
def test_arrows_point_one_way(room):
    """Each room imports only the rooms its row in ARROWS names: daemon ->
    commands -> storage, pipeline -> storage; handlers reach the daemon only
    through the context, storage knows none of the others, Spark's side
    reads the log's format, never the daemon, the client library talks to
    the daemon over the wire only (it needs redis-py, not the daemon's
    code), and only the command line imports what it runs."""
    allowed = {f: ARROWS[room] | BEYOND_THEIR_ROOM.get(f, set()) for f in rooms_imported(room)}
    bad = {f: sorted(others - allowed[f]) for f, others in rooms_imported(room).items() if others - allowed[f]}
    assert not bad, f"{room}/ may import only {sorted(ARROWS[room])}: {bad}"


def test_cython_imports_and_includes_are_read(tmp_path):
    (tmp_path / "part.pxi").write_text("from leaseq.daemon.metrics import BUCKETS\n")
    f = tmp_path / "m.pyx"
    f.write_text('from leaseq.storage._job cimport Job\ncimport leaseq.storage.bands\ninclude "part.pxi"\n'
                 "def f():\n    from leaseq.commands.jobs import claim_now\n")
    assert cython_imports_of(f) == {"leaseq.storage._job", "leaseq.storage.bands", "leaseq.daemon.metrics",
                                    "leaseq.commands.jobs"}


# Modules that import each other round a cycle, each to be untied (issue 42):
# the list may only shrink.  A twin that imports its definition's module
# (job.py loads _job.pyx, which takes JobExtra from job.py); the settings and
# the TLS context they check.
KNOWN_CYCLES = [
    ["leaseq.daemon.config", "leaseq.daemon.tls"],
    ["leaseq.storage._job", "leaseq.storage.job"],
]


def test_no_new_import_cycle():
    assert cycles(import_graph()) == KNOWN_CYCLES


def test_cycles_finds_a_cycle_however_it_is_closed():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_every_error_sentence_is_written_in_commands_errors():
    """Error replies and protocol-error sentences are built only in
    commands/errors.py (docs/errors.md says so): no ``Error(...)``,
    ``err(...)`` or ``ProtocolError(...)`` with literal text anywhere else."""
    root = ROOT
    builders = {"Error", "err", "ProtocolError"}
    for room in ("commands", "daemon", "storage"):
        for path in (root / room).glob("*.py"):
            if path.name == "errors.py" and room == "commands":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name in builders and isinstance(node.args[0], (ast.Constant, ast.JoinedStr)):
                    raise AssertionError(f"{room}/{path.name}:{node.lineno} builds an error message inline")


# -- tickets: what each reply waits for ----------------------------------------------------------------

def test_push_on_an_fsync_queue_waits_for_fsync_of_the_next_generation(core, c):
    call(c, "QCREATE", "q")
    core.store.journal.log.flush()
    reply, ticket = run(c, "QPUSH", "q", "job")
    assert reply == 1
    assert ticket == Ticket(core.store.journal.log.written_generation + 1, True)


@pytest.mark.parametrize("durability, waits", [("fsync", True), ("async", False)])
def test_push_ticket_follows_the_queue_durability(core, c, durability, waits):
    call(c, "QCREATE", "q", "DURABILITY", durability)
    assert run(c, "QPUSH", "q", "x")[1].fsync          # the first push reserves an id block (IDMARK)
    core.store.journal.log.flush_and_sync()
    assert run(c, "QPUSH", "q", "y")[1].fsync is waits


def test_memory_queue_commands_log_nothing(core, c):
    call(c, "QCREATE", "m", "DURABILITY", "memory")
    assert run(c, "QPUSH", "m", "first")[1].fsync      # ids survive restarts: the IDMARK is logged
    settle(core)
    before = logged(core)
    for args in (("QPUSH", "m", "x"), ("QCLAIM", "m", "w"), ("QLEN", "m")):
        assert run(c, *args)[1] is None
    assert logged(core) == before


def test_leases_are_written_but_not_waited_for_unless_lease_sync(core, c):
    call(c, "QCREATE", "q")
    call(c, "QPUSHMANY", "q", 2, "a", "b")
    settle(core)
    (job,), ticket = run(c, "QCLAIM", "q", "w")
    assert ticket is not None and not ticket.fsync
    core.store.journal.lease_sync = True
    _, ticket = run(c, "QCLAIM", "q", "w")
    assert ticket.fsync


def test_reads_and_refusals_have_no_ticket(core, c):
    call(c, "QCREATE", "q")
    settle(core)
    for args in (("QLEN", "q"), ("QINFO", "q"), ("PING",), ("QPEEK", "q"), ("QGET", "q", 1)):
        assert run(c, *args)[1] is None, args[0]
    reply, ticket = execute(c, [b"QPUSH", b"q", b"x", b"PRIORITY", b"12"])
    assert isinstance(reply, Error) and ticket is None
    reply, ticket = execute(c, [b"QACK", b"nope", b"1.1.1"])
    assert reply.code == "NOQUEUE" and ticket is None


def test_a_reply_that_may_show_a_change_waits_until_the_log_cannot_refuse_it(core, c):
    """docs/semantics.md §5.4: a read (or a write that logs nothing) run
    while a change is on its way to the log waits for it, so that a change
    answered -MISCONF is never seen; ``own`` tells it from the change's own
    reply.  Commands that show no queue (PING) wait for nothing."""
    log = core.store.journal.log
    call(c, "QCREATE", "f")
    call(c, "QCREATE", "a", "DURABILITY", "async")
    call(c, "QCREATE", "m", "DURABILITY", "memory")
    call(c, "QPUSH", "m", "first")                                   # (its id block's IDMARK)
    log.flush_and_sync()
    other = Client(core)
    assert run(other, "QLEN", "f")[1] is None                        # nothing on its way
    assert run(c, "QPUSH", "f", "x")[1] == Ticket(2, True, True)    # (an IDMARK and the PUSH)
    for args in (("QLEN", "f"), ("QLEN", "m"), ("INFO", "queues"), ("QACK", "f", "1.1.1"), ("QPUSH", "m", "y")):
        assert run(other, *args)[1] == Ticket(2, True, False), args
    assert run(other, "PING")[1] is None
    log.flush()
    assert run(other, "QPEEK", "f")[1] == Ticket(2, True, False)    # written, not yet durable
    run(c, "QPUSH", "a", "z")                                        # an async change behind it ...
    assert run(other, "QLEN", "a")[1] == Ticket(3, True, False)     # ... joins the fsync the read waits for
    log.flush()
    assert log.sync_wanted                                          # (the read asked for generation 2's fsync)
    target = log.start_sync()
    log.synced(target, 0)
    assert run(other, "QLEN", "f")[1] is None
    run(c, "QPUSH", "a", "w")
    assert run(other, "QLEN", "a")[1] == Ticket(4, False, False)    # an async change: its write is enough
    log.flush()
    assert run(other, "QLEN", "a")[1] is None


def _acked_before_a_claim(core, c, *create):
    """Queue q made with ``create``, three jobs, two of them claimed (lease
    1 s) and all settled; then another client acks the first: that ack's
    ticket, and the tickets of a claim and of a read made after it."""
    call(c, "QCREATE", "q", *create)
    call(c, "QPUSHMANY", "q", 3, "a", "b", "c")
    first, _ = call(c, "QCLAIM", "q", "w", "COUNT", 2, "LEASE", 1000)
    settle(core)
    other = Client(core)
    _, ack = run(other, "QACK", "q", first[b"lease"])
    _, claim = run(c, "QCLAIM", "q", "w", "LEASE", 1000)
    _, read = run(c, "QLEN", "q")
    return ack, claim, read


def test_a_claim_does_not_wait_for_the_fsync_of_an_ack_no_claim_can_see(core, c):
    """docs/semantics.md §5.2: the acked job was under a live lease, so a
    claim could not have taken it either way, and on a queue without
    CONCURRENCY or groups an ack frees no claim's way: the claim waits for
    the write only (its own CLAIM record); a read still waits for the fsync."""
    ack, claim, read = _acked_before_a_claim(core, c)
    assert ack.fsync and ack.own
    assert claim == Ticket(ack.generation, False, True)
    assert read == Ticket(ack.generation, True, False)


@pytest.mark.parametrize("create", [("CONCURRENCY", 2), ("GROUP-CONCURRENCY", 2), ("RESULT-TTL", 0)],
                         ids=["concurrency", "group-concurrency", "no-rule"])
def test_a_claim_waits_for_the_fsync_of_an_ack_that_may_free_its_way(core, c, create):
    ack, claim, _ = _acked_before_a_claim(core, c, *create)
    expected_wait = create[0] != "RESULT-TTL"          # (the last: a setting that frees nobody's way)
    assert claim == Ticket(ack.generation, expected_wait, True)


def test_a_claim_waits_for_the_fsync_of_an_ack_once_the_acked_lease_would_have_ended(core, c):
    """Refused, the ack leaves the job in flight until its deadline: a claim
    made from then on could have taken it, so it waits."""
    call(c, "QCREATE", "q")
    call(c, "QPUSHMANY", "q", 3, "a", "b", "c")
    held, _ = call(c, "QCLAIM", "q", "w", "COUNT", 2, "LEASE", 1000, now=T0)
    settle(core)
    assert run(Client(core), "QACK", "q", held[b"lease"], now=T0 + 500)[1].fsync
    assert not run(c, "QCLAIM", "q", "w", now=T0 + 999)[1].fsync
    assert run(c, "QCLAIM", "q", "w", now=T0 + 1000)[1].fsync


@pytest.mark.parametrize("before", [("QPUSH", "q", "d"), ("QNACK", "q", "LEASE2", "DEAD"), ("QDEL", "q", 3),
                                    ("QACK", "q", "LEASE1", "RESULT", "r")],
                         ids=["push", "nack-dead", "del", "ack-with-result"])
def test_a_claim_waits_for_the_fsync_of_any_other_change(core, c, before):
    call(c, "QCREATE", "q", "RESULT-TTL", 60_000)
    call(c, "QPUSHMANY", "q", 3, "a", "b", "c")
    jobs = call(c, "QCLAIM", "q", "w", "COUNT", 2, "LEASE", 1000)
    settle(core)
    leases = {"LEASE1": jobs[0][b"lease"], "LEASE2": jobs[1][b"lease"]}
    _, ticket = run(Client(core), *[leases.get(a, a) for a in before])
    assert ticket.fsync
    assert run(c, "QCLAIM", "q", "w")[1].fsync


def test_an_ack_blind_to_claims_joins_the_earliest_deadline_until_it_is_durable():
    """``LogBuffer``: the moment claims start to depend on acks in flight
    is the earliest of their deadlines, until an fsync covers them all."""
    log = MemoryLog()
    log.append(records.ACK, b"x", True, blind_until=2000)
    log.append(records.ACK, b"y", True, blind_until=1000)
    assert log.settled_since(log.mark(), claim_at=999) == Ticket(1, False, False)
    assert log.settled_since(log.mark(), claim_at=1000) == Ticket(1, True, False)
    assert log.settled_since(log.mark()) == Ticket(1, True, False)
    log.flush()
    log.synced(log.start_sync(), 0)
    log.append(records.ACK, b"z", True, blind_until=5000)      # the earlier deadlines are on disk
    assert log.settled_since(log.mark(), claim_at=4999) == Ticket(2, False, False)
    log.append(records.PUSH, b"p", True)
    assert log.settled_since(log.mark(), claim_at=0) == Ticket(2, True, False)


def test_auto_created_queue_is_an_fsynced_record_even_for_a_read_that_creates(core, c):
    _, ticket = run(c, "QCLAIM", "fresh", "w")          # QCLAIM creates the queue, finds nothing
    assert ticket.fsync
    assert logged(core)[-1] == records.QUEUE


def test_blocking_claim_that_finds_nothing_parks_with_the_ticket_of_what_it_logged(c):
    reply, ticket = execute(c, [b"QCLAIM", b"new", b"w", b"BLOCK", b"0"])
    assert isinstance(reply, ClaimWait)
    assert ticket is not None and ticket.fsync            # the QUEUE record it created
    assert call(c, "QCLAIM", "new", "w", "BLOCK", 0) == PARKED
    settle(c.server)
    reply, ticket = execute(c, [b"QCLAIM", b"new", b"w", b"BLOCK", b"0"])
    assert isinstance(reply, ClaimWait) and ticket is None


def test_exec_is_one_txn_record_whose_ticket_waits_if_any_command_would(core, c):
    call(c, "QCREATE", "a", "DURABILITY", "async")
    call(c, "QCREATE", "f")
    call(c, "QPUSH", "a", "x")
    settle(core)
    before = len(logged(core))
    assert call(c, "MULTI") == "OK"
    assert call(c, "QCLAIM", "a", "w") == "QUEUED"
    assert call(c, "QPUSH", "a", "y") == "QUEUED"
    replies, ticket = run(c, "EXEC")
    assert len(replies) == 2 and not ticket.fsync
    call(c, "MULTI")
    call(c, "QPUSH", "a", "z")
    call(c, "QPUSH", "f", "z")
    replies, ticket = run(c, "EXEC")
    assert replies == [3, 1] and ticket.fsync
    assert logged(core)[before:] == [records.TXN, records.TXN]


def test_exec_with_a_run_time_error_keeps_the_other_commands(core, c):
    call(c, "QCREATE", "q")
    call(c, "QPUSH", "q", "first")                     # the id block is reserved here
    call(c, "MULTI")
    call(c, "QPUSH", "q", "x")
    call(c, "QACK", "missing", "1.1.1")
    replies, ticket = run(c, "EXEC")
    assert replies[0] == 2 and isinstance(replies[1], Error) and replies[1].code == "NOQUEUE"
    assert ticket.fsync
    assert logged(core)[-1] == records.PUSH           # one record: written as itself, not a TXN


def test_generation_moves_on_only_when_the_log_is_written(core, c):
    call(c, "QCREATE", "q")
    t1 = run(c, "QPUSH", "q", "a")[1]
    t2 = run(c, "QPUSH", "q", "b")[1]
    assert t1 == t2                                     # one turn: one generation
    log = core.store.journal.log
    assert not log.reached(t1)
    log.flush()
    assert not log.reached(t1)                          # written, not yet durable
    assert log.reached(Ticket(t1.generation, False))
    log.synced(log.start_sync(), 0)
    assert log.reached(t1)
    assert run(c, "QPUSH", "q", "c")[1].generation == t1.generation + 1


# -- the dispatcher's checks, once for every command ------------------------------------------------

def test_unknown_command_and_wrong_arity_are_refused_before_any_handler(c):
    reply, ticket = execute(c, [b"NOPE", b"a"])
    assert reply.line == "ERR unknown command 'NOPE', with args beginning with: 'a' " and ticket is None
    reply, _ = execute(c, [b"QPUSH", b"q"])
    assert reply.line == "ERR wrong number of arguments for 'qpush' command"


def test_noauth_until_auth_when_a_password_is_set():
    core = Core(requirepass="s3cret")
    c = Client(core)
    reply, _ = execute(c, [b"QLEN", b"q"])
    assert reply.code == "NOAUTH"
    assert call(c, "PING") == "PONG"                   # noauth commands pass
    assert call(c, "AUTH", "s3cret") == "OK"
    assert execute(c, [b"QPUSH", b"q", b"x"])[0] == 1


def test_denyoom_commands_are_refused_when_memory_is_over_and_log_nothing(core, c):
    call(c, "QCREATE", "q")
    call(c, "QPUSH", "q", "x")
    settle(core)
    core.oom = True
    reply, ticket = execute(c, [b"QPUSH", b"q", b"y"])
    assert reply.code == "OOM" and ticket is None
    (job,) = call(c, "QCLAIM", "q", "w")               # not denyoom: works
    assert call(c, "QACK", "q", job[b"lease"]) == 1


def test_a_command_that_fails_to_queue_aborts_exec(c):
    call(c, "QCREATE", "q")
    settle(c.server)
    call(c, "MULTI")
    call(c, "QPUSH", "q", "x")
    assert isinstance(execute(c, [b"QPUSH"])[0], Error)
    reply, ticket = execute(c, [b"EXEC"])
    assert reply.code == "EXECABORT" and ticket is None
    assert call(c, "QLEN", "q") == 0


def test_a_handler_bug_is_an_error_reply_not_a_crash(c, monkeypatch, caplog):
    def broken(client, args):
        raise ZeroDivisionError("bug")

    route = dispatch.Route(dataclasses.replace(TABLE[b"qlen"], handler=broken))
    monkeypatch.setitem(dispatch.ROUTES, b"qlen", route)
    monkeypatch.setitem(dispatch.ROUTES, b"QLEN", route)
    reply, ticket = execute(c, [b"QLEN", b"q"])
    assert reply.line == "ERR internal error while running the command; see the server log"
    assert ticket is None
    assert "command QLEN failed" in caplog.text
    assert call(c, "PING") == "PONG"


# -- the in-memory log replays like a directory ---------------------------------------------------------

def test_what_commands_log_in_memory_replays_to_the_same_queues(core, c):
    call(c, "QCREATE", "q", "MAXDELIVERIES", 1, "DEADLETTER", "dlq")
    call(c, "QPUSHMANY", "q", 3, "a", "b", "c", "PRIORITY", 7)
    (j1, j2) = call(c, "QCLAIM", "q", "w", "COUNT", 2, "LEASE", 100)
    call(c, "QACK", "q", j1[b"lease"])
    call(c, "QNACK", "q", j2[b"lease"], "DELAY", 0, "ERROR", "boom")
    call(c, "QCLAIM", "q", "w", "COUNT", 3, now=T0 + 1)      # j2 dies on the way (MAXDELIVERIES 1)
    replayed = Store(Journal(None))
    log = core.store.journal.log
    log.flush()
    replayer = Replayer(replayed)
    for rtype, body in log.records():
        replayer.apply(rtype, body)

    def view(store):
        return {name: sorted((j.id, j.state, j.deliveries, j.last_error, j.payload) for j in q.jobs.values())
                for name, q in store.queues.items()}

    assert view(replayed) == view(core.store)
    assert view(replayed)[b"dlq"] == [(1, b"ready", 0, b"boom", b"b")]


def test_memory_log_is_durable_once_written():
    log = MemoryLog()
    mark = log.mark()
    log.append(records.IDMARK, records.idmark(1, 5), sync=True)
    ticket = log.ticket_since(mark)
    log.flush_and_sync()
    assert log.reached(ticket)
    assert log.records() == [(records.IDMARK, records.idmark(1, 5))]


# -- while recovery runs ----------------------------------------------------------------------------

def refusal(c, *args) -> Error:
    with pytest.raises(Error) as e:
        call(c, *args)
    return e.value


def test_while_loading_only_commands_flagged_loading_run(core, c):
    core.loading = True
    loading = refusal(c, "PING")
    assert (loading.code, loading.message) == ("LOADING", "leaseq is loading the dataset in memory")
    assert refusal(c, "QPUSH", "q", "x").code == "LOADING"
    assert refusal(c, "QLEN", "q").code == "LOADING"
    assert call(c, "TIME") and call(c, "LASTSAVE") == 0
    assert call(c, "INFO", "queues") == b"# Queues\r\n"                 # INFO runs (no queues yet)
    assert call(c, "MULTI") == "OK"
    assert refusal(c, "QPUSH", "q", "x").code == "LOADING"           # refused, so EXEC aborts
    assert refusal(c, "EXEC").code == "EXECABORT"
    assert core.store.queues == {} and logged(core) == []
    core.loading = False
    assert call(c, "PING") == "PONG"


# -- one way in: what the checks read --------------------------------------------------------------

def test_every_command_has_one_route_under_its_name_in_either_case():
    for name, command in TABLE.items():
        route = dispatch.ROUTES[name]
        assert dispatch.ROUTES[name.upper()] is route and route.command is command
        assert (route.name, route.handler, route.arity) == (command.name, command.handler, command.arity)
        for flag, field in (("noauth", "noauth"), ("loading", "loading"), ("write", "write"), ("pubsub", "pubsub"),
                            ("denyoom", "denyoom"), ("direct", "direct"), ("transaction", "transaction"),
                            ("no-multi", "no_multi")):
            assert getattr(route, field) is (flag in command.flags), (name, flag)
        assert route.observes is bool(command.observes) and route.claims is (command.observes == "claims")
    assert len(dispatch.ROUTES) == 2 * len(TABLE)


def test_a_command_in_mixed_case_finds_its_route(c):
    call(c, "QCREATE", "q")
    assert execute(c, [b"qPuSh", b"q", b"x"])[0] == 1 and c.last_command == "qpush"
    assert call(c, "QLEN", "q") == 1


def test_the_daemon_and_the_test_core_are_the_two_parties(tmp_path, core, c):
    from leaseq.commands.parties import Caller, Host

    server = Server(config.Settings(dir=str(tmp_path / "data")))
    assert isinstance(server, Host) and isinstance(Connection(server), Caller)
    assert isinstance(core, Host) and isinstance(c, Caller)
    core.at(T0 + 5)
    assert core.now_ms() == core.clock.now() == T0 + 5


def test_a_commands_time_lands_in_its_bucket():
    """``Histogram.observe`` counts a duration in the first bucket whose
    bound is not below it (``bisect_left`` of the bounds), at and around
    every bound; ``Metrics.command`` in the command's own histogram."""
    from bisect import bisect_left

    from leaseq.daemon.metrics import BUCKETS, Histogram, Metrics

    h = Histogram()
    durations = [0.0, 1e-9, 10.0] + [b * f for b in BUCKETS for f in (0.999, 1.0, 1.001)]
    expected = [0] * (len(BUCKETS) + 1)
    for seconds in durations:
        h.observe(seconds)
        expected[bisect_left(BUCKETS, seconds)] += 1
    assert h.counts == expected and h.total == pytest.approx(sum(durations))
    m = Metrics(None)
    m.command("qpush", 0.0002)
    m.command("qpush", 0.003)
    assert sum(m.commands["qpush"].counts) == 2 and list(m.commands) == ["qpush"]
