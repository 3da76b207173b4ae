"""Fixtures shared by the integration tests.

Each test module shares one daemon (``daemon``) to keep the suite fast, started
with the module's ``SHARED_DAEMON_ENV`` if it has one; tests use their own
queue names (``q`` / ``unique``).  Tests that change server-wide settings,
restart, or may hurt the daemon start their own with ``own(env={...})``.
"""

import pytest

from harness import Daemon, unique


@pytest.fixture(scope="module")
def shared_daemon(request, tmp_path_factory):
    """The module's daemon.  A module whose tests need other settings names
    the daemon's environment in a module global ``SHARED_DAEMON_ENV``
    (e.g. ``{"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"}``)."""
    env = getattr(request.module, "SHARED_DAEMON_ENV", None)
    d = Daemon(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]) / "data", env=env)
    d.start()
    yield d
    d.kill()


@pytest.fixture
def daemon(shared_daemon):
    assert shared_daemon.proc.poll() is None, "the shared daemon died in an earlier test"
    return shared_daemon


@pytest.fixture
def q():
    return unique()


@pytest.fixture
def own(tmp_path):
    """Start a daemon of the test's own: ``own(env={...})``."""
    started = []

    def start(env: dict | None = None) -> Daemon:
        d = Daemon(tmp_path / f"own{len(started)}", env=env)
        d.start()
        started.append(d)
        return d

    yield start
    for d in started:
        d.kill()
