"""Run the real daemon as a subprocess for tests: free loopback port, temp
directory, readiness polled with a deadline, stopped by PID."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import time

import redis

LEASEQ = [sys.executable, "-m", "leaseq.daemon.cli"]
HOST = "127.0.0.1"


_names = itertools.count(1)


def unique(prefix: str = "q") -> str:
    """A queue name no other test in this process uses (tests share daemons)."""
    return f"{prefix}-{next(_names)}"


def wait_for(predicate, timeout: float = 5.0, what: str = "condition"):
    """Poll ``predicate`` until it returns something true (returned), with a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        time.sleep(0.005)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Daemon:
    """One leaseq process on ``data_dir``; ``restart()`` reuses dir and port."""

    def __init__(self, data_dir: str, *args: str, port: int | None = None, env: dict | None = None,
                 log_path: str | None = None) -> None:
        self.data_dir = str(data_dir)
        self.args = list(args)
        self.port = port or free_port()
        self.env = dict(os.environ, **(env or {}))
        self.log_path = log_path or os.path.join(self.data_dir + ".log")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0, extra: tuple = ()) -> "Daemon":
        self._log = open(self.log_path, "ab")
        cmd = LEASEQ + ["serve", "--port", str(self.port), "--dir", self.data_dir] + self.args + list(extra)
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"leaseq exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection((HOST, self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"leaseq not ready within {timeout} s:\n{self.log()}")

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
