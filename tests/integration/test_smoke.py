import pytest
from harness import Daemon, PortTaken, as_map


def test_push_claim_ack_cycle(r):
    job_id = r.execute_command("QPUSH", "jobs", "hello")
    [job] = r.execute_command("QCLAIM", "jobs", "w1")
    fields = as_map(job)
    assert fields[b"id"] == job_id and fields[b"payload"] == b"hello"
    assert r.execute_command("QACK", "jobs", fields[b"lease"]) == 1
    assert r.execute_command("QLEN", "jobs") == 0


# -- the harness under pytest-xdist: a free port taken before the daemon binds it ------------------

def test_a_port_taken_by_another_daemon_moves_the_new_one_elsewhere(daemon, tmp_path):
    """Another worker's daemon got the port first: the new daemon's PING
    would reach that one, so the harness checks the answering process_id,
    sees its own daemon exit with 'address already in use' and moves on."""
    d = Daemon(tmp_path / "data")
    d.port = daemon.port                      # as if free_port had handed out the same port twice
    d.start()
    try:
        assert d.port != daemon.port
        assert d.client().info("server")["process_id"] == d.proc.pid
        assert daemon.client().info("server")["process_id"] == daemon.proc.pid
    finally:
        d.kill()


def test_a_port_named_by_the_test_is_never_moved(daemon, tmp_path):
    d = Daemon(tmp_path / "data", port=daemon.port)
    with pytest.raises(PortTaken):
        d.start()
    assert d.proc.poll() is not None
