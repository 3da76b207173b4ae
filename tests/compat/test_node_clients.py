"""ioredis and node-redis, unchanged, against a real daemon (docs/compatibility.md):
push, claim, blocking claim, ack, pipeline, MULTI/EXEC, QWORK through
SUBSCRIBE, and the refusal of QWORK's push frames they cannot read.

The clients are installed with npm into a cache directory shared by test runs
(``LEASEQ_NPM_CACHE``, default ``~/.cache/leaseq/npm``), keyed by the exact
versions below; ``tests/compat/clients.js`` drives each one and prints what
worked."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import Daemon

HERE = Path(__file__).resolve().parent

# npm alias -> the exact release tested (docs/compatibility.md lists them)
PACKAGES = {
    "ioredis": "ioredis@5.11.1",
    "ioredis6": "ioredis@6.0.0",
    "redis4": "redis@4.7.1",
    "redis": "redis@5.12.1",
    "redis6": "redis@6.3.1",
}
# ioredis 5 and node-redis 4 speak only RESP2 (they ignore a request for 3)
CASES = [(package, 2) for package in PACKAGES] + [("ioredis6", 3), ("redis", 3), ("redis6", 3)]


@pytest.fixture(scope="session")
def npm_dir() -> Path:
    """The packages, installed once per set of versions."""
    for tool in ("node", "npm"):
        assert shutil.which(tool), f"{tool} is needed for the client compatibility tests"
    specs = sorted(f"{alias}@npm:{spec}" if alias != spec.split("@")[0] else spec for alias, spec in PACKAGES.items())
    key = hashlib.sha256(" ".join(specs).encode()).hexdigest()[:16]
    root = Path(os.environ.get("LEASEQ_NPM_CACHE", Path.home() / ".cache" / "leaseq" / "npm"))
    target = root / key
    target.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)            # two test runs never install into one directory at once
        if not (target / "installed").exists():
            (target / "package.json").write_text('{"name": "leaseq-compat", "private": true}\n')
            done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", *specs],
                                  cwd=target, capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, f"npm install failed:\n{done.stdout}\n{done.stderr}"
            (target / "installed").write_text(" ".join(specs) + "\n")
    return target


@pytest.fixture(scope="module")
def leaseq(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("compat") / "data").start()
    yield d
    d.stop()


@pytest.mark.parametrize("package, resp", CASES)
def test_node_client(leaseq, npm_dir, package, resp):
    done = subprocess.run(["node", str(HERE / "clients.js"), package, str(leaseq.port), str(resp)],
                          env=dict(os.environ, LEASEQ_NPM_DIR=str(npm_dir)), capture_output=True, text=True,
                          timeout=120)
    lines = done.stdout.strip().splitlines()
    assert lines, f"no output; stderr:\n{done.stderr}"
    result = json.loads(lines[-1])
    assert "fatal" not in result, result["fatal"]
    assert result["version"] == PACKAGES[package].split("@")[1]
    assert result["spoken"] == resp                         # CLIENT INFO's resp= on its connection
    assert result["features"] and all(v == "ok" for v in result["features"].values()), result["features"]
    assert done.returncode == 0
