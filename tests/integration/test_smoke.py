from harness import as_map


def test_push_claim_ack_cycle(r):
    job_id = r.execute_command("QPUSH", "jobs", "hello")
    [job] = r.execute_command("QCLAIM", "jobs", "w1")
    fields = as_map(job)
    assert fields[b"id"] == job_id and fields[b"payload"] == b"hello"
    assert r.execute_command("QACK", "jobs", fields[b"lease"]) == 1
    assert r.execute_command("QLEN", "jobs") == 0
