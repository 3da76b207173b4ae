"""The rules of reply ordering (daemon/outbox.py), with no socket and no log:
a ``reached`` predicate stands for the log's progress."""

from __future__ import annotations

from leaseq.daemon.outbox import Outbox
from leaseq.storage.wal import Ticket

WRITE1 = Ticket(1, False)      # generation 1 written
SYNC1 = Ticket(1, True)        # generation 1 durable
SYNC2 = Ticket(2, True)


def log_at(written: int, durable: int):
    """What ``LogBuffer.reached`` answers when the log has written
    ``written`` generations and made ``durable`` of them durable."""
    return lambda t: t.generation <= (durable if t.fsync else written)


def test_a_reply_without_a_ticket_goes_out_at_once():
    box = Outbox()
    assert box.add(b"+PONG\r\n") is False
    assert box.take() == b"+PONG\r\n"
    assert box.take() == b"" and not box.held


def test_replies_that_wait_for_nothing_leave_together_in_order():
    box = Outbox()
    for n in range(3):
        box.add(b":%d\r\n" % n)
    assert box.take() == b":0\r\n:1\r\n:2\r\n"


def test_a_reply_with_a_ticket_is_held_until_the_log_reaches_it():
    box = Outbox()
    assert box.add(b":1\r\n", SYNC1) is True
    assert box.take() == b"" and box.held
    assert box.release(log_at(written=1, durable=0)) == b""      # written, not yet durable
    assert box.held
    assert box.release(log_at(written=1, durable=1)) == b":1\r\n"
    assert not box.held


def test_a_ticket_that_needs_only_the_write_is_released_by_the_write():
    box = Outbox()
    box.add(b":7\r\n", WRITE1)
    assert box.release(log_at(written=0, durable=0)) == b""
    assert box.release(log_at(written=1, durable=0)) == b":7\r\n"


def test_a_read_behind_a_held_write_waits_and_leaves_with_it():
    box = Outbox()
    box.add(b":1\r\n", SYNC1)
    assert box.add(b"$5\r\nhello\r\n") is False          # no ticket of its own, yet not sent
    assert box.take() == b""
    assert box.release(log_at(1, 1)) == b":1\r\n$5\r\nhello\r\n"


def test_a_reply_whose_ticket_is_reached_still_waits_for_an_earlier_one():
    box = Outbox()
    box.add(b":1\r\n", SYNC2)            # needs generation 2 durable
    box.add(b":2\r\n", WRITE1)           # needs only generation 1 written
    assert box.release(log_at(written=2, durable=1)) == b""     # the first blocks the second
    assert box.release(log_at(written=2, durable=2)) == b":1\r\n:2\r\n"


def test_release_stops_at_the_first_reply_the_log_has_not_reached():
    box = Outbox()
    box.add(b":1\r\n", SYNC1)
    box.add(b"+OK\r\n")
    box.add(b":2\r\n", SYNC2)
    box.add(b"+OK\r\n")
    assert box.release(log_at(2, 1)) == b":1\r\n+OK\r\n"
    assert box.held
    assert box.release(log_at(2, 2)) == b":2\r\n+OK\r\n"
    assert not box.held


def test_replies_already_sent_are_not_held_back_by_a_later_ticket():
    box = Outbox()
    box.add(b"+PONG\r\n")
    box.add(b":1\r\n", SYNC1)
    assert box.take() == b"+PONG\r\n"
    assert box.release(log_at(1, 1)) == b":1\r\n"


def test_a_parked_claim_holds_its_place_without_bytes():
    box = Outbox()
    box.hold_place(WRITE1)               # the QUEUE record a blocked claim logged before parking
    assert box.held
    box.add(b"*0\r\n")                   # its answer, later: waits behind its own records
    assert box.take() == b""
    assert box.release(log_at(1, 0)) == b"*0\r\n"


def test_a_failed_log_fails_every_held_reply_with_a_ticket_in_order():
    box = Outbox()
    box.add(b":1\r\n", SYNC1)
    box.add(b"$1\r\nx\r\n")              # a reply that shows no queue (ECHO) keeps its answer
    box.add(b":2\r\n", SYNC2)
    box.add(b":7\r\n", Ticket(2, True, own=False))   # a read that may show the refused change does not
    err, unseen = b"-MISCONF disk\r\n", b"-MISCONF unseen\r\n"
    assert box.fail(err, unseen) == err + b"$1\r\nx\r\n" + err + unseen
    assert not box.held and box.release(log_at(9, 9)) == b""


def test_a_failed_log_drops_a_parked_claims_place():
    box = Outbox()
    box.hold_place(SYNC1)
    assert box.fail(b"-MISCONF disk\r\n", b"-MISCONF unseen\r\n") == b""     # the claim gets its own answer
    assert not box.held


def test_fail_leaves_replies_that_needed_nothing_alone():
    box = Outbox()
    box.add(b"+PONG\r\n")
    assert box.fail(b"-MISCONF disk\r\n", b"-MISCONF unseen\r\n") == b""
    assert box.take() == b"+PONG\r\n"


def test_clear_forgets_everything():
    box = Outbox()
    box.add(b"+PONG\r\n")
    box.add(b":1\r\n", SYNC1)
    box.clear()
    assert box.take() == b"" and not box.held
