"""What every ``leaseq bench`` benchmark shares: a daemon subprocess on a free
loopback port (started, waited for, killed by PID), INFO as a dict, RSS,
directory sizes, percentiles and the printed table.

redis-py is imported here, not by the daemon: it comes with the ``bench``
extra (``pip install 'leaseq[bench]'``; the ``test`` extra has it too).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time

import redis

HOST = "127.0.0.1"


def progress(msg: str) -> None:
    """A benchmark's progress line, on stderr (its figures go to stdout)."""
    print(f"# {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def leaseq_command() -> list[str]:
    """How to run ``leaseq``: the script beside this interpreter when it is
    there, else ``python -m leaseq.cli``."""
    script = os.path.join(os.path.dirname(sys.executable), "leaseq")
    if os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-m", "leaseq.cli"]


def clean_env(extra: dict | None = None) -> dict:
    """This process's environment without LEASEQ_* settings (a benchmark
    measures the defaults unless it says otherwise), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEQ_")}
    env.update(extra or {})
    return env


_RECOVERED = re.compile(
    r"recovered (?P<queues>\d+) queues from (?:snapshot (?P<snapshot>\S+) \((?P<snap_jobs>\d+) jobs, "
    r"(?P<snap_bytes>\d+) bytes\) and |no snapshot and )?(?P<segments>\d+) segments \((?P<records>\d+) records, "
    r"(?P<bytes>\d+) bytes;.*?\) in (?P<seconds>[\d.]+) s")


def parse_recovery(text: str) -> dict | None:
    """The last recovery summary line in a daemon's log, as numbers."""
    found = None
    for m in _RECOVERED.finditer(text):
        found = m
    if found is None:
        return None
    g = found.groupdict()
    return {
        "queues": int(g["queues"]),
        "snapshot": g["snapshot"],
        "snapshot_jobs": int(g["snap_jobs"] or 0),
        "snapshot_bytes": int(g["snap_bytes"] or 0),
        "segments": int(g["segments"]),
        "records": int(g["records"]),
        "bytes": int(g["bytes"]),
        "seconds": float(g["seconds"]),
    }


def parse_info(text) -> dict:
    """INFO's text → {field: value}, numbers as int or float (redis-py may
    have parsed it into a dict already)."""
    if isinstance(text, dict):
        return text
    if isinstance(text, bytes):
        text = text.decode()
    out: dict = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or ":" not in line:
            continue
        k, v = line.split(":", 1)
        for conv in (int, float):
            try:
                out[k] = conv(v)
                break
            except ValueError:
                pass
        else:
            out[k] = v
    return out


def wait_pong(proc: subprocess.Popen, port: int, deadline: float, name: str) -> float:
    """Poll PING on ``port`` every 5 ms until +PONG (before the monotonic
    ``deadline``, while ``proc`` lives); return the monotonic time of the
    +PONG.  Any RESP server: leaseq answers -LOADING while it recovers, a
    redis-server refuses connections until it listens."""
    sock = None
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}")
            try:
                if sock is None:
                    sock = socket.create_connection((HOST, port), timeout=1.0)
                sock.sendall(b"PING\r\n")
                reply = sock.recv(64)
                if reply.startswith(b"+PONG"):
                    return time.monotonic()
                if not reply:
                    sock.close()
                    sock = None
            except OSError:
                if sock is not None:
                    sock.close()
                    sock = None
            time.sleep(0.005)
    finally:
        if sock is not None:
            sock.close()
    raise RuntimeError(f"{name} not ready on port {port} in time")


def pin_threads(pid: int, cpus: set[int]) -> int:
    """Set the CPU affinity of every thread of ``pid`` (threads it starts
    later inherit it from their creator); return how many were pinned.
    os.sched_setaffinity(pid) alone would move only the main thread."""
    pinned = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = [str(pid)]
    for tid in tids:
        try:
            os.sched_setaffinity(int(tid), cpus)
            pinned += 1
        except (ProcessLookupError, PermissionError):
            pass
    return pinned


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads, and the
    children it waited for) from /proc/<pid>/stat; nan when unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return math.nan
    # after "pid (comm)": state is field 3, utime..cstime are fields 14..17
    ticks = sum(int(v) for v in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def read_calls(pid: int) -> float:
    """The read system calls a process has made (``syscr`` of
    ``/proc/<pid>/io``: read, readv, pread; a socket server's receives); nan
    when unreadable."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("syscr:"):
                    return float(line.split()[1])
    except OSError:
        pass
    return math.nan


def steal_seconds(cpus) -> float:
    """Seconds the hypervisor ran something else while ``cpus`` wanted to
    run (the steal column of their ``/proc/stat`` lines); nan when unknown.
    Two of these around a run say how much of it the host took away."""
    wanted = {f"cpu{c}" for c in cpus}
    total, seen = 0, 0
    try:
        with open("/proc/stat") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] in wanted and len(fields) > 8:
                    total += int(fields[8])
                    seen += 1
    except OSError:
        return math.nan
    return total / os.sysconf("SC_CLK_TCK") if seen == len(wanted) else math.nan


def cpu_by_process() -> dict[int, float]:
    """cpu_seconds of every process now, by PID: two of these around a run
    show how much CPU the machine's other processes took meanwhile."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            seconds = cpu_seconds(int(name))
            if not math.isnan(seconds):
                out[int(name)] = seconds
    return out


def rss_of(pid: int) -> int:
    """VmRSS of a process in bytes (0 when unreadable)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def dir_bytes(path: str) -> int:
    """Total size of the regular files under ``path``."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def percentile(values, p: float) -> float:
    """The ``p``-th percentile (0..100) by nearest rank; nan when empty."""
    if not values:
        return math.nan
    s = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(s)))
    return s[min(rank, len(s)) - 1]


class Daemon:
    """One ``leaseq serve`` process on ``data_dir``.  ``start`` may be called
    again after ``kill``/``stop`` (same directory, a new free port); every
    process is stopped by its PID."""

    def __init__(self, data_dir: str, log_path: str, env: dict | None = None, args: tuple = ()) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.env = clean_env(env)
        self.args = list(args)
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.started_at = 0.0
        self._log = None
        self._log_offset = 0

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc else 0

    def start(self, timeout: float = 600.0, port: int | None = None) -> float:
        """Start (on ``port``, else a free one) and wait until PING answers
        +PONG (recovery done); return the seconds from process start to that
        answer."""
        self.port = port or free_port()
        self._log = open(self.log_path, "ab")
        self._log_offset = self._log.tell()
        cmd = leaseq_command() + ["serve", "--port", str(self.port), "--dir", self.data_dir,
                                  "--loglevel", "info"] + self.args
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                     stdin=subprocess.DEVNULL)
        return self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> float:
        """Until PING answers +PONG (a -LOADING answer means recovery still runs)."""
        try:
            return wait_pong(self.proc, self.port, self.started_at + timeout, "leaseq") - self.started_at
        except RuntimeError as e:
            self.kill()
            raise RuntimeError(f"{e}:\n{self.log()[-3000:]}") from None

    def client(self, **kw) -> redis.Redis:
        kw.setdefault("socket_timeout", 120)
        return redis.Redis(host=HOST, port=self.port, protocol=2, **kw)

    def log(self) -> str:
        """What this run of the process logged (since the last ``start``)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def recovery(self) -> dict | None:
        return parse_recovery(self.log())

    def info(self, section: str = "") -> dict:
        with self.client() as c:
            return parse_info(c.execute_command("INFO", *([section] if section else [])))

    def rss(self) -> int:
        """used_memory_rss from INFO memory, else VmRSS from /proc."""
        try:
            return int(self.info("memory")["used_memory_rss"])
        except (redis.RedisError, KeyError, ValueError):
            return rss_of(self.pid)

    def kill(self) -> None:
        """SIGKILL by PID: the crash recovery is about."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self._close_log()

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM by PID and wait; SIGKILL if it does not stop in time."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def wait_snapshot(d: Daemon, taken_before: int, timeout: float = 600.0, interval: float = 0.02) -> dict:
    """Wait until INFO persistence shows a snapshot taken after
    ``taken_before`` and none in progress, polling every ``interval`` s;
    return that INFO."""
    deadline = time.monotonic() + timeout
    while True:
        info = d.info("persistence")
        if info.get("snapshots_taken", 0) > taken_before and info.get("snapshot_in_progress") == 0:
            return info
        if info.get("last_snapshot_status") not in (None, "ok") and info.get("snapshot_in_progress") == 0:
            raise RuntimeError(f"snapshot failed: {info.get('last_snapshot_status')}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no snapshot within {timeout} s")
        time.sleep(interval)


def mib(n: float) -> float:
    return n / (1 << 20)


def print_table(title: str, rows: list[tuple], out=None, baseline: str = "before snapshots") -> None:
    """Rows of (figure, value, unit, baseline-or-empty) as aligned columns;
    ``baseline`` heads the last column."""
    out = out or sys.stdout
    rows = [(str(a), _fmt(b), str(c), _fmt(d) if d is not None and d != "" else "") for a, b, c, d in rows]
    w0 = max([len("figure")] + [len(r[0]) for r in rows])
    w1 = max([len("value")] + [len(r[1]) for r in rows])
    w2 = max([len("unit")] + [len(r[2]) for r in rows])
    print(title, file=out)
    print(f"  {'figure':<{w0}}  {'value':>{w1}}  {'unit':<{w2}}  {baseline}".rstrip(), file=out)
    for a, b, c, d in rows:
        print(f"  {a:<{w0}}  {b:>{w1}}  {c:<{w2}}  {d}".rstrip(), file=out)
    out.flush()


def print_grid(title: str, header: list[str], rows: list[list], right: set[int] = frozenset(), out=None) -> None:
    """A title and rows of any number of columns, aligned; numbers are
    formatted as in print_table, and columns whose index is in ``right``
    are right-aligned."""
    out = out or sys.stdout
    cells = [[_fmt(v) if v is not None else "" for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]

    def line(values):
        parts = [f"{v:>{w}}" if i in right else f"{v:<{w}}" for i, (v, w) in enumerate(zip(values, widths))]
        return ("  " + "  ".join(parts)).rstrip()

    print(title, file=out)
    print(line(header), file=out)
    for r in cells:
        print(line(r), file=out)
    out.flush()


def _fmt(v) -> str:
    if isinstance(v, float):
        if math.isnan(v):
            return "n/a"
        if abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _plain(v):
    """nan → None, so the file is strict JSON."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def publish(result: dict, report, json_path: str | None) -> dict:
    """Print a bench's table (``report(result)``), write its JSON when asked."""
    report(result)
    if json_path:
        write_json(json_path, result)
    return result


def write_json(path: str, data: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(_plain(data), f, indent=2, allow_nan=False, default=str)
        f.write("\n")
