"""Run the real daemon as a subprocess for tests: free loopback port, temp
directory, readiness polled with a deadline, stopped by PID; and the small
helpers most test files use beside it: clients (no retries, raw RESP, a
transport from an address the loopback cannot have), replies (maps, QINFO /
QGET / QCLAIM, QSCAN walks, the DEBUG clock, errors, BGSAVE), threads that
keep their failures, ``leaseq bench`` runs.

The helpers of fewer tests have modules of their own beside this one:
``harness_http`` (the HTTP listener, users and the status page, in requests
and in headless Chromium), ``harness_client`` (leaseq.client's workers:
worker processes, heartbeats through leases, spans), ``harness_disk`` (data
directories written byte by byte) and ``harness_tls`` (a throwaway PKI and
TLS clients).  Each helper is defined in one of them and imported from
there.  Fixtures live in the conftest.py files; a test file imports helpers
from these modules, never from another test file."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

import hiredis
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

LEASEQ = [sys.executable, "-m", "leaseq.cli"]
HOST = "127.0.0.1"
ROOT = pathlib.Path(__file__).resolve().parents[1]      # the repository


DEBUG_ENV = {"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"}     # a daemon that answers DEBUG (its clock, faults ...)

_names = itertools.count(1)


def unique(prefix: str = "q") -> str:
    """A queue name no other test in this process uses (tests share daemons)."""
    return f"{prefix}-{next(_names)}"


def wait_for(predicate, timeout: float = 5.0, what: str = "condition", interval: float = 0.005):
    """Poll ``predicate`` every ``interval`` s until it returns something true
    (returned), with a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class PortTaken(RuntimeError):
    """The daemon could not bind its port: another process holds it."""


class Daemon:
    """One leaseq process on ``data_dir``; ``restart()`` reuses dir and port."""

    def __init__(self, data_dir: str, *args: str, port: int | None = None, env: dict | None = None,
                 log_path: str | None = None) -> None:
        self.data_dir = str(data_dir)
        self.args = list(args)
        self.port = port or free_port()
        self._port_chosen_here = port is None       # may move to another free port if taken at the first start
        self._started = False
        self.env = dict(os.environ, **(env or {}))
        self.log_path = log_path or os.path.join(self.data_dir + ".log")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0, extra: tuple = (), ready: bool = True) -> "Daemon":
        """Run the daemon; wait until PING answers PONG (recovery done)
        unless ``ready`` is False.  A port picked by ``free_port`` can be
        taken by another process (another pytest-xdist worker's daemon)
        before ours binds it: then, at the first start only, it moves to
        another free port."""
        for attempt in range(3):
            self._log = open(self.log_path, "ab")
            cmd = LEASEQ + ["serve", "--port", str(self.port), "--dir", self.data_dir] + self.args + list(extra)
            self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
            if not ready:
                break
            try:
                self.wait_ready(timeout)
                break
            except PortTaken:
                if not self._port_chosen_here or self._started or attempt == 2:
                    raise
                self.port = free_port()
        self._started = True
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = self.log()
                error = PortTaken if "address already in use" in log[-2000:].lower() else RuntimeError
                raise error(f"leaseq exited with {self.proc.returncode}:\n{log}")
            try:
                with socket.create_connection((HOST, self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG") and self._answers_as_ours(s):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"leaseq not ready within {timeout} s:\n{self.log()}")

    def _answers_as_ours(self, s: socket.socket) -> bool:
        """The daemon on the port is this process, not another test's that
        holds the port (INFO's process_id; a daemon that wants a password
        first is taken at its word)."""
        s.sendall(b"INFO server\r\n")
        reply = b""
        while b"process_id:" not in reply or not reply.endswith(b"\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                return False
            reply += chunk
            if reply.startswith(b"-"):
                return True
        pid = reply.split(b"process_id:", 1)[1].split(b"\r\n", 1)[0]
        return pid == str(self.proc.pid).encode()

    @property
    def url(self) -> str:
        """The daemon's redis:// URL (what leaseq.client's Queue takes)."""
        return f"redis://{HOST}:{self.port}"

    def client(self, **kw) -> redis.Redis:
        kw.setdefault("socket_timeout", 30)
        return redis.Redis(host=HOST, port=self.port, **kw)

    def log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM (graceful) and wait; SIGKILL if it does not stop in time."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError("leaseq did not stop on SIGTERM")
        finally:
            self._log.close()

    def kill(self) -> None:
        """SIGKILL: the crash every durability promise is about."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        if getattr(self, "_log", None):
            self._log.close()

    def restart(self, timeout: float = 20.0) -> "Daemon":
        return self.start(timeout)

    def __enter__(self) -> "Daemon":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.kill() if exc[0] else self.stop()


def start_pair(tmp_path, *args: str, env: dict | None = None) -> tuple[Daemon, Daemon]:
    """A primary and its replica, in ``tmp_path``, once the replica's link is up."""
    primary = Daemon(tmp_path / "primary", *args, env=env).start()
    replica = Daemon(tmp_path / "replica", "--replicaof", f"127.0.0.1 {primary.port}", *args, env=env).start()
    wait_for(lambda: linked(replica), timeout=20, what="the replica's link")
    return primary, replica


def linked(replica: Daemon) -> bool:
    return replica.client().info("replication").get("master_link_status") == "up"


def caught_up(primary: Daemon, replica: Daemon) -> None:
    """Wait until the replica holds everything the primary wrote."""
    p, r = primary.client(), replica.client()
    wait_for(lambda: r.info("replication")["slave_repl_offset"] == p.info("replication")["master_repl_offset"],
             timeout=20, what="the replica to catch up")


class CheckedThread(threading.Thread):
    """A (daemon) thread that keeps what its target raised, an assertion
    included, in ``failure`` (the traceback text; None when it ran through).
    An exception in a plain thread only becomes a warning, so the test asserts
    ``t.failure is None`` in its own thread after the join."""

    def __init__(self, target, args: tuple = (), daemon: bool = True) -> None:
        super().__init__(target=target, args=args, daemon=daemon)
        self.failure: str | None = None

    def run(self) -> None:
        try:
            super().run()
        except BaseException:
            self.failure = traceback.format_exc()


def run_threads(target, n: int, timeout: float = 30.0) -> None:
    """Run ``target`` in ``n`` CheckedThreads at once; fail with the first
    thread's failure, or if one is still running after ``timeout``."""
    threads = [CheckedThread(target=target) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive() and t.failure is None, t.failure


# -- reply helpers ----------------------------------------------------------------------------


class BlockedClaim(threading.Thread):
    """A QCLAIM on a connection of its own, in a thread; ``t_sent`` /
    ``t_reply`` are wall-clock seconds around the call."""

    def __init__(self, d: Daemon, q: str, consumer: str, *options, close: bool = True) -> None:
        super().__init__(daemon=True)
        self.client = d.client(protocol=2)
        self.client.ping()          # connected before the claim is timed
        self.args = (q, consumer) + options
        self.close_after = close
        self.reply = self.error = None
        self.t_sent = self.t_reply = None
        self.start()

    def run(self) -> None:
        try:
            self.t_sent = time.time()
            reply = self.client.execute_command("QCLAIM", *self.args)
            self.t_reply = time.time()
            self.reply = [as_map(j) for j in reply]
        except Exception as e:         # reported by result()
            self.error = e
        finally:
            if self.close_after:
                self.client.close()

    def result(self, timeout: float = 10.0) -> list[dict]:
        self.join(timeout)
        assert not self.is_alive(), f"QCLAIM {self.args} still blocked after {timeout} s"
        if self.error is not None:
            raise self.error
        return self.reply


def no_retry_client(d: Daemon, **kw) -> redis.Redis:
    """redis-py (RESP2 unless ``protocol=`` says) without its automatic
    retries: a command cut by a kill or stop must fail (unknown outcome),
    never be silently re-sent."""
    kw.setdefault("protocol", 2)
    return d.client(retry=Retry(NoBackoff(), 0), **kw)


def as_map(reply, *, str_keys: bool = False) -> dict:
    """A map reply: RESP3 dict, or RESP2 flat [k1, v1, k2, v2 ...].
    ``str_keys=True``: the keys decoded to str."""
    if not isinstance(reply, dict):
        assert isinstance(reply, list) and len(reply) % 2 == 0, reply
        reply = dict(zip(reply[::2], reply[1::2]))
    if str_keys:
        return {k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}
    return reply


def qinfo(c, q, *, str_keys: bool = False) -> dict:
    return as_map(c.execute_command("QINFO", q), str_keys=str_keys)


def qget(c, q, job_id, *, str_keys: bool = False):
    """QGET as a map, or None for an unknown job."""
    reply = c.execute_command("QGET", q, job_id)
    return None if reply is None else as_map(reply, str_keys=str_keys)


def qscan_pages(c, q, *options, count: int = 5):
    """Each reply of a whole QSCAN walk of ``q`` (``COUNT count`` and
    ``options`` on every call), as its jobs' maps: one list per call."""
    cursor = b"0"
    for _ in range(10_000):
        cursor, jobs = c.execute_command("QSCAN", q, cursor, "COUNT", count, *options)
        yield [as_map(j) for j in jobs]
        if cursor == b"0":
            return
    raise AssertionError("QSCAN did not end")


def qscan_all(c, q, *options, count: int = 5) -> list[dict]:
    """Every job a whole QSCAN walk of ``q`` returns, in order, as maps."""
    return [job for page in qscan_pages(c, q, *options, count=count) for job in page]


def now(c) -> int:
    """The daemon's clock, ms (DEBUG CLOCK: a daemon started with DEBUG_ENV)."""
    return as_map(c.execute_command("DEBUG", "CLOCK"))[b"now"]


def advance(c, ms: int) -> None:
    """Move the daemon's DEBUG clock ``ms`` on."""
    assert c.execute_command("DEBUG", "CLOCK", "ADVANCE", ms) == b"OK"


def claim(c, q, consumer="w", *options) -> list[dict]:
    return [as_map(j) for j in c.execute_command("QCLAIM", q, consumer, *options)]


def claim_one(c, q, consumer="w", *options) -> dict:
    jobs = claim(c, q, consumer, *options)
    assert len(jobs) == 1, jobs
    return jobs[0]


def job_bytes(c) -> int:
    """What MEMORY USAGE counts for a job beyond its payload in the flavour
    the daemon runs (storage/queries.py: JOB_BYTES)."""
    return 150 if c.info("server")["leaseq_flavour"] == "compiled" else 280


def error_text(c, *args) -> str:
    """The error reply of a command as redis-py reports it: ``ERR`` is
    stripped, other codes kept."""
    with pytest.raises(redis.ResponseError) as e:
        c.execute_command(*args)
    return str(e.value)


def fsync_counts(c) -> tuple[int, int]:
    """(fsyncs, of them run on the loop's thread), from INFO persistence."""
    info = c.info("persistence")
    return info["fsyncs"], info["fsyncs_inline"]


def writes_resume(c, queue: str = "q", timeout: float = 10.0, payload: str = "after") -> int:
    """After a disk fault (DEBUG FAULT): push until a push succeeds, each
    refusal being -MISCONF; the id of the one that went in."""
    got: list = []

    def pushed() -> bool:
        try:
            got.append(c.execute_command("QPUSH", queue, payload))
            return True
        except redis.ResponseError as e:
            assert "MISCONF" in str(e), e
            return False
    wait_for(pushed, timeout, "writes to resume", interval=0.05)
    return got[0]


def bgsave(c) -> None:
    """BGSAVE and wait until that snapshot is written and none runs."""
    taken = c.info("persistence")["snapshots_taken"]
    assert c.execute_command("BGSAVE") in (b"Background saving started", "Background saving started", True)
    deadline = time.monotonic() + 60
    while True:
        info = c.info("persistence")
        if info["snapshots_taken"] > taken and not info["snapshot_in_progress"]:
            return
        assert info["last_snapshot_status"] == "ok", info
        assert time.monotonic() < deadline, info
        time.sleep(0.02)


def most_in_window(moments: list[int], span: int) -> int:
    """The most of ``moments`` (ms) inside any window of ``span`` ms that
    starts at one of them: what a sliding-window rate limit bounds."""
    times = sorted(moments)
    return max((sum(1 for m in times[i:] if m < start + span) for i, start in enumerate(times)), default=0)


class ClockWatch:
    """Says, when a timing test fails, how long the call that failed took
    and whether the wall clock (which the daemon's clock follows) stepped
    meanwhile, against the monotonic clock (which the daemon's timers use)."""

    def __init__(self) -> None:
        self.wall, self.mono = time.time(), time.monotonic()
        self.asked = self.mono

    def ask(self) -> None:
        self.asked = time.monotonic()

    def said(self) -> str:
        now = time.monotonic()
        step = (time.time() - self.wall) - (now - self.mono)
        return f"(the call took {now - self.asked:.2f} s; the wall clock stepped {step:+.3f} s during the test)"


def wait_blocked(c, q, n: int) -> None:
    """Wait (5 s at most) until ``n`` claimers are blocked on ``q``.  A queue
    that only a blocked claim creates does not exist until the claimer's
    thread has sent it: until then none blocks there."""
    def blocked() -> int:
        try:
            return qinfo(c, q)[b"consumers_blocked"]
        except redis.ResponseError as e:
            if not str(e).startswith("NOQUEUE"):
                raise
            return 0
    wait_for(lambda: blocked() == n, 5, f"{n} claimers blocked on {q}")


# -- raw RESP on a socket ----------------------------------------------------------------------


class RespSocket:
    """A raw socket with hiredis's reader: to see RESP2 push arrays, RESP3
    ``>`` frames, protocol errors and closes exactly as sent."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.reader = hiredis.Reader()

    def send(self, *args) -> None:
        self.sock.sendall(hiredis.pack_command(args))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self):
        for _ in range(10_000):                 # each recv is bounded by the socket timeout
            frame = self.reader.gets()
            if frame is not False:
                return frame
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the server")
            self.reader.feed(data)
        raise AssertionError("no complete frame in 10000 reads")

    def read_until(self, predicate, limit: int = 100) -> list:
        """Frames up to and including the first one ``predicate`` accepts."""
        frames = []
        for _ in range(limit):
            frames.append(self.read())
            if predicate(frames[-1]):
                return frames
        raise AssertionError(f"no matching frame in {limit}: {frames}")

    def closed_by_server(self) -> bool:
        """True when the server closes the connection (within the socket timeout)."""
        try:
            for _ in range(1000):
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        return False

    def close(self) -> None:
        self.sock.close()


# -- a client the loopback cannot produce -------------------------------------------------------


class StandInTransport:
    """What ``Connection.connection_made`` and ``Admission.register`` read of a
    transport, reporting a client address (``peer``) that a test on
    127.0.0.1 cannot have; it keeps what is written to it."""

    def __init__(self, peer) -> None:
        self.peer = peer
        self.written = b""
        self.closed = False

    def get_extra_info(self, name, default=None):
        return {"peername": self.peer, "sockname": ("0.0.0.0", 6479)}.get(name, default)

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True


# -- the leaseq command and the repository --------------------------------------------------------


def run_bench(tmp_path, *args: str, figures: tuple, timeout: float = 110) -> dict:
    """Run ``leaseq bench ARGS --json F`` (``timeout`` s at most); check it
    succeeds and prints each of ``figures``; return the JSON it wrote."""
    out = tmp_path / "bench.json"
    run = subprocess.run([*LEASEQ, "bench", *args, "--json", str(out)], check=False,
                         capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stdout + run.stderr
    for figure in figures:
        assert figure in run.stdout, run.stdout
    return json.loads(out.read_text())


def load_setup():
    """The repository's setup.py as a module (not __main__: setup() does not run)."""
    spec = importlib.util.spec_from_file_location("leaseq_setup_script", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
