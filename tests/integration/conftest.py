"""Fixtures shared by the integration tests.

Each test module shares one daemon (``daemon``) to keep the suite fast, started
with the module's ``SHARED_DAEMON_ENV`` if it has one; tests use their own
queue names (``q`` / ``unique``).  Tests that change server-wide settings,
restart, or may hurt the daemon start their own with ``own(env={...})``.
Rules about time run on ``f``, a module daemon whose DEBUG clock is frozen
(``frozen_daemon``), so they hold exactly however the machine is timed.
The status page's clicks run in ``browser`` (headless Chromium) against
``page_daemon``; the client's tracing is read from ``spans``.
"""

import shutil

import pytest
from selenium import webdriver

from harness import Daemon, start_pair, unique
from harness_client import Spans
from harness_http import acl_daemon

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")


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


@pytest.fixture(scope="module")
def frozen_daemon(tmp_path_factory):
    """A second module daemon, DEBUG enabled, whose clock stands still
    unless a test moves it (``DEBUG CLOCK ADVANCE``): time-dependent rules
    checked exactly, whatever the machine's timing."""
    d = Daemon(tmp_path_factory.mktemp("frozen") / "data", env={"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"})
    d.start()
    c = d.client()
    assert c.execute_command("DEBUG", "CLOCK", "FREEZE") == b"OK"
    c.close()
    yield d
    d.kill()


@pytest.fixture
def f(frozen_daemon):
    """redis-py (RESP2) on the module's frozen daemon."""
    assert frozen_daemon.proc.poll() is None, "the frozen daemon died in an earlier test"
    c = frozen_daemon.client(protocol=2)
    yield c
    c.close()


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


@pytest.fixture
def pair(tmp_path):
    """A primary and its replica of the test's own, linked (``harness.start_pair``)."""
    primary, replica = start_pair(tmp_path)
    yield primary, replica
    replica.kill()
    primary.kill()


@pytest.fixture(scope="module")
def page_daemon(tmp_path_factory):
    """The module's daemon for the status page's clicks: ``harness_http.acl_daemon``'s users."""
    d = acl_daemon(tmp_path_factory.mktemp("browser"))
    yield d
    d.kill()


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium driven by Selenium, one for the module."""
    assert CHROMIUM and CHROMEDRIVER, "bin/test installs Debian's chromium and chromium-driver when run as root"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1500,1300"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(20)
    driver.execute_cdp_cmd("Network.enable", {})
    yield driver
    driver.quit()


@pytest.fixture
def spans():
    """A tracer provider of the test's own whose finished spans stay in memory (``harness_client.Spans``)."""
    s = Spans()
    yield s
    s.provider.shutdown()
