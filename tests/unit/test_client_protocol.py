"""leaseq.client's shared core (client/protocol.py, client/errors.py): the
commands built from Python arguments and the replies parsed into Python
values, the same for the thread and asyncio flavours, with no daemon."""

from __future__ import annotations

import pytest
import redis
from redis._parsers.base import BaseParser

from leaseq.client import errors, protocol
from leaseq.client.protocol import Job
from leaseq.commands.errors import CODES

RESP3_JOB = {b"id": 7, b"payload": b"\x00\xffbin", b"lease": b"7.1.3", b"deadline": 1_800_000_030_000,
             b"deliveries": 2, b"priority": 9, b"enqueued_at": 1_800_000_000_000, b"key": b"k\x00",
             b"last_error": b"smtp timeout"}


def flat(mapping: dict) -> list:
    """The RESP2 shape of a map: [field, value, field, value, ...]."""
    return [part for item in mapping.items() for part in item]


def test_a_job_reads_the_same_from_resp2_and_resp3():
    job = protocol.parse_job("emails", RESP3_JOB)
    assert job == protocol.parse_job("emails", flat(RESP3_JOB))
    assert job == Job(queue="emails", id=7, payload=b"\x00\xffbin", lease="7.1.3", deadline=1_800_000_030_000,
                      deliveries=2, priority=9, enqueued_at=1_800_000_000_000, key=b"k\x00",
                      last_error="smtp timeout")
    assert job.dead_letter_from is None and job.extra == {}


def test_dead_letter_provenance_and_unknown_fields():
    """The provenance fields get their types; a field a newer daemon adds
    lands in ``extra`` instead of breaking the parse."""
    reply = {**RESP3_JOB, b"dead_letter_from": b"emails", b"dead_letter_src_id": 3,
             b"dead_letter_deliveries": 2, b"dead_letter_reason": b"max-deliveries", b"shiny_new_field": b"x"}
    for shape in (reply, flat(reply)):
        job = protocol.parse_job("emails-dead", shape)
        assert (job.dead_letter_from, job.dead_letter_src_id, job.dead_letter_deliveries,
                job.dead_letter_reason) == ("emails", 3, 2, "max-deliveries")
        assert job.extra == {"shiny_new_field": b"x"}
        assert job.dead_letter_parent is None


def test_a_parent_failed_job_names_its_parent():
    reply = {**RESP3_JOB, b"dead_letter_from": b"thumbs", b"dead_letter_src_id": 7, b"dead_letter_deliveries": 0,
             b"dead_letter_reason": b"parent-failed", b"dead_letter_parent": [b"uploads", 3]}
    for shape in (reply, flat(reply)):
        job = protocol.parse_job("thumbs.dlq", shape)
        assert (job.dead_letter_from, job.dead_letter_src_id, job.dead_letter_parent) == ("thumbs", 7, ("uploads", 3))


def test_jobs_are_frozen_and_hashable():
    job = protocol.parse_job("q", {**RESP3_JOB, b"extra_field": [1]})
    with pytest.raises(AttributeError):
        job.lease = "other"
    assert {job: 1}[job] == 1


def test_claim_reply_empty_and_many():
    assert protocol.parse_jobs("q", []) == []
    assert [j.id for j in protocol.parse_jobs("q", [RESP3_JOB, flat({**RESP3_JOB, b"id": 8})])] == [7, 8]


def test_a_compact_job_reads_as_the_same_job_as_its_map():
    """QCLAIM ... COMPACT: the seven values in the map's order, then the
    other fields as a map (RESP3) or a flat list (RESP2)."""
    first = [RESP3_JOB[k] for k in (b"id", b"payload", b"lease", b"deadline", b"deliveries", b"priority",
                                     b"enqueued_at")]
    rest = {b"key": RESP3_JOB[b"key"], b"last_error": RESP3_JOB[b"last_error"], b"future_field": 1}
    full = protocol.parse_job("emails", RESP3_JOB)
    for compact in (first + [rest], first + [flat(rest)]):
        job = protocol.parse_jobs("emails", [compact], compact=True)[0]
        assert job == full and job.extra == {"future_field": 1}
    plain = protocol.parse_jobs("emails", [first], compact=True)[0]
    assert (plain.id, plain.lease, plain.key, plain.last_error) == (7, "7.1.3", None, None)
    assert protocol.parse_jobs("emails", [], compact=True) == []
    assert protocol.claim_command("q", "w1", 2, compact=True) == ["QCLAIM", "q", "w1", "COUNT", 2, "COMPACT"]


def test_meta_reads_the_same_from_maps_flat_lists_and_compact_jobs():
    tags = {b"tenant": b"acme", b"raw": b"\xff"}
    want = {"tenant": "acme", "raw": "\ufffd"}
    first = [RESP3_JOB[k] for k in (b"id", b"payload", b"lease", b"deadline", b"deliveries", b"priority",
                                     b"enqueued_at")]
    shapes = [{**RESP3_JOB, b"meta": tags}, flat({**RESP3_JOB, b"meta": flat(tags)})]
    jobs = [protocol.parse_job("q", shape) for shape in shapes]
    jobs += [protocol.parse_jobs("q", [first + [rest]], compact=True)[0]
             for rest in ({b"meta": tags}, flat({b"meta": flat(tags)}))]
    assert [j.meta for j in jobs] == [want] * 4 and all(j.extra == {} for j in jobs)
    assert {jobs[0]: 1}[jobs[0]] == 1                        # a job with meta is still hashable
    assert protocol.parse_job("q", RESP3_JOB).meta is None


def test_meta_is_sent_last_as_field_value_pairs():
    assert protocol.push_command("q", "p", meta={"a": "1", b"b": b"2"}, group="g", priority=3) == [
        "QPUSH", "q", "p", "PRIORITY", 3, "GROUP", "g", "META", "a", "1", b"b", b"2"]
    assert protocol.push_many_command("q", ["x", "y"], meta={"a": "1"}, groups=["g", "h"]) == [
        "QPUSHMANY", "q", 2, "x", "y", "GROUPS", "g", "h", "META", "a", "1"]
    assert protocol.schedule_command("q", "s", "p", every_ms=10, meta={"a": "1"}) == [
        "QSCHEDULE", "q", "s", "p", "EVERY", 10, "META", "a", "1"]
    assert protocol.push_command("q", "p", meta={}) == protocol.push_command("q", "p", meta=None) == ["QPUSH", "q", "p"]
    with pytest.raises(TypeError, match="a mapping of field names to values, not list"):
        protocol.push_command("q", "p", meta=[("a", "1")])
    with pytest.raises(TypeError, match="str or bytes, not NoneType"):
        protocol.push_command("q", "p", meta={"a": None})


def test_push_options_become_qpush_arguments():
    assert protocol.push_command("q", "p") == ["QPUSH", "q", "p"]
    assert protocol.push_command("q", b"p", priority=9, delay_ms=500, key="k", key_scope="active",
                                 max_deliveries=3, expire_ms=60_000) == [
        "QPUSH", "q", b"p", "KEY", "k", "WHILE", "active", "PRIORITY", 9, "DELAY", 500,
        "MAXDELIVERIES", 3, "EXPIRE", 60_000]
    assert protocol.push_command("q", "p", at_ms=1_800_000_000_000) == ["QPUSH", "q", "p", "AT", 1_800_000_000_000]
    assert protocol.push_command("q", "p", priority=0, delay_ms=0) == ["QPUSH", "q", "p", "PRIORITY", 0, "DELAY", 0]


def test_push_many_arguments_with_keys():
    assert protocol.push_many_command("q", ["a", b"b"], keys=["k1", "k2"], priority=1) == [
        "QPUSHMANY", "q", 2, "a", b"b", "KEYS", "k1", "k2", "PRIORITY", 1]
    with pytest.raises(ValueError, match="one key per payload"):
        protocol.push_many_command("q", ["a", "b"], keys=["k1"])


@pytest.mark.parametrize("options, message", [
    ({"delay_ms": 1, "at_ms": 2}, "delay_ms or at_ms"),
    ({"key_scope": "active"}, "key_scope applies to a dedupe key"),
])
def test_push_mistakes_are_named_before_sending(options, message):
    with pytest.raises(ValueError, match=message):
        protocol.push_command("q", "p", **options)


@pytest.mark.parametrize("payload", [{"to": "ann"}, ["a"], 17, None])
def test_only_bytes_and_str_payloads(payload):
    with pytest.raises(TypeError, match="a payload is bytes or str"):
        protocol.push_command("q", payload)
    with pytest.raises(TypeError, match="a payload is bytes or str"):
        protocol.push_many_command("q", ["ok", payload])


def test_unknown_push_option_is_a_type_error():
    with pytest.raises(TypeError):
        protocol.push_command("q", "p", prio=3)


def test_claim_ack_nack_extend_arguments():
    job = protocol.parse_job("q", RESP3_JOB)
    assert protocol.claim_command("q", "w1") == ["QCLAIM", "q", "w1", "COUNT", 1]
    assert protocol.claim_command("q", "w1", 4, lease_ms=300, block_ms=0) == [
        "QCLAIM", "q", "w1", "COUNT", 4, "LEASE", 300, "BLOCK", 0]
    assert protocol.ack_command("q", job) == protocol.ack_command("q", "7.1.3") == ["QACK", "q", "7.1.3"]
    assert protocol.nack_command("q", job) == ["QNACK", "q", "7.1.3"]
    assert protocol.nack_command("q", job, error="ValueError: x", delay_ms=0, dead=False) == [
        "QNACK", "q", "7.1.3", "DELAY", 0, "ERROR", "ValueError: x"]
    assert protocol.nack_command("q", job, dead=True) == ["QNACK", "q", "7.1.3", "DEAD"]
    assert protocol.extend_command("q", [job, "8.1.4"], 900) == ["QEXTEND", "q", "7.1.3", "8.1.4", "LEASE", 900]


@pytest.mark.parametrize("block_ms, socket_timeout, expected", [
    (5000, 10.0, 15.0),        # the wait plus what any reply may take
    (5000, None, None),        # no timeout stays no timeout
    (0, 10.0, None),           # BLOCK 0 waits for ever
    (None, 2.0, 2.0),
])
def test_a_blocking_claim_outlasts_its_wait(block_ms, socket_timeout, expected):
    assert protocol.claim_socket_timeout(block_ms, socket_timeout) == expected


def test_qinfo_reply_as_a_dict():
    reply = {b"name": b"emails", b"lease": 30000, b"deadletter": None, b"backoff_exponent": b"2.0",
             b"durability": b"fsync", b"ready": 2}
    for shape in (reply, flat(reply)):
        assert protocol.parse_info(shape) == {"name": "emails", "lease": 30000, "deadletter": None,
                                              "backoff_exponent": 2.0, "durability": "fsync", "ready": 2}


def test_decoding_clients_are_refused():
    with pytest.raises(ValueError, match="decode_responses"):
        protocol.check_raw_replies({"decode_responses": True})
    protocol.check_raw_replies({"decode_responses": False})


# -- errors ----------------------------------------------------------------------------------

def parsed(reply_line: str) -> redis.ResponseError:
    """The exception redis-py makes of an error reply line (without '-')."""
    return BaseParser.parse_error(reply_line)


@pytest.mark.parametrize("line, cls, code, message", [
    ("NOQUEUE no such queue 'x'", errors.NoQueue, "NOQUEUE", "no such queue 'x'"),
    ("FULL queue 'x' is full (MAXLEN 1)", errors.Full, "FULL", "queue 'x' is full (MAXLEN 1)"),
    ("TOOBIG payload is 2000 bytes", errors.TooBig, "TOOBIG", "payload is 2000 bytes"),
    ("CLOSED queue 'x' was dropped", errors.Closed, "CLOSED", "queue 'x' was dropped"),
    ("EXISTS queue 'x' exists", errors.LeaseqError, "EXISTS", "queue 'x' exists"),
    ("ERR syntax error", errors.LeaseqError, "ERR", "syntax error"),
    ("OOM command not allowed", errors.LeaseqError, "OOM", "command not allowed"),
    ("NOPERM User w has no permissions", errors.LeaseqError, "NOPERM", "User w has no permissions"),
])
def test_error_replies_map_to_classes_with_their_code(line, cls, code, message):
    error = errors.from_response_error(parsed(line))
    assert type(error) is cls
    assert isinstance(error, errors.LeaseqError) and isinstance(error, redis.ResponseError)
    assert (error.code, error.message, str(error)) == (code, message, f"{code} {message}")


def test_the_client_knows_every_code_redis_py_leaves_in_the_message():
    """Every code commands/errors.py can answer with is either one redis-py
    strips (and names with a class or status_code) or in OWN_CODES, which the
    client reads from the message: a new code in the daemon fails here."""
    assert set(CODES) - set(BaseParser.EXCEPTION_CLASSES) == errors.OWN_CODES
    assert set(errors.CLASSES) <= set(CODES)
