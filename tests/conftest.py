import pytest

from harness import Daemon
from harness_tls import make_pki


@pytest.fixture
def daemon(tmp_path):
    """A fresh daemon on a free port and an empty data directory."""
    d = Daemon(tmp_path / "data")
    d.start()
    yield d
    d.kill()


@pytest.fixture
def r(daemon):
    """redis-py on the daemon, RESP2 (the default of redis-cli and valkey-py)."""
    c = daemon.client(protocol=2)
    yield c
    c.close()


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    """A throwaway CA with server and client certificates (harness_tls.make_pki),
    made once for the whole run."""
    return make_pki(tmp_path_factory.mktemp("pki"))
