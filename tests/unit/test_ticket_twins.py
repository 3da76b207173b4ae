"""The compiled lane's twins of ``LogBuffer.settled_since`` and
``ticket_since`` (daemon/_lane.pyx), which the plain commands and the serve
of a parked claim ask for their tickets: driven by the same generated
histories of a log as the Python methods, they give the same tickets and
leave the log in the same state (``settled_since`` moves ``_sync_gen``).
A journal whose methods are not a ``LogBuffer``'s own has them called."""

from __future__ import annotations

import importlib

from hypothesis import given, settings
from hypothesis import strategies as st

from leaseq.storage import records
from leaseq.storage.journal import Journal
from leaseq.storage.wal import LogBuffer, MemoryLog, Ticket

lane = importlib.import_module("leaseq.daemon._lane")     # built by bin/setup wherever there is a C compiler

STATE = LogBuffer.__slots__

# one step of a log's life: append (sync?, blind_until), flush, start an fsync, finish it, or ask
steps = st.one_of(
    st.tuples(st.just("append"), st.booleans(), st.sampled_from([0, 0, 5, 10, 20])),
    st.tuples(st.just("flush")),
    st.tuples(st.just("start_sync")),
    st.tuples(st.just("synced")),
    st.tuples(st.just("settled"), st.integers(0, 40), st.sampled_from([None, 0, 5, 9, 10, 15, 30])),
    st.tuples(st.just("ticket"), st.integers(0, 40)),
)


def state(log: LogBuffer) -> dict:
    return {name: getattr(log, name) for name in STATE}


@settings(max_examples=300, deadline=None)
@given(st.lists(steps, max_size=40))
def test_the_twins_answer_and_move_the_log_as_the_methods_do(history):
    python_log, twin_log = MemoryLog(), MemoryLog()
    twin_journal = Journal(twin_log)
    covers: dict[int, int] = {}
    for step in history:
        kind = step[0]
        if kind == "append":
            for log in (python_log, twin_log):
                log.append(records.IDMARK, records.idmark(1, log.mark() + 1), step[1], step[2])
        elif kind == "flush":
            for log in (python_log, twin_log):
                log.flush()
        elif kind == "start_sync":
            for log in (python_log, twin_log):
                covers[id(log)] = log.start_sync()
        elif kind == "synced":
            for log in (python_log, twin_log):
                if id(log) in covers:
                    log.synced(covers[id(log)], 0)
        elif kind == "settled":
            mark = min(step[1], python_log.mark())
            want = python_log.settled_since(mark, step[2])
            got = lane.settled_since(twin_journal, mark, step[2])
            assert got == want and type(got) is type(want), step
        else:
            mark = min(step[1], python_log.mark())
            want = python_log.ticket_since(mark)
            got = lane.ticket_since(twin_journal, mark)
            assert got == want and type(got) is type(want), step
        assert state(twin_log) == state(python_log), step


def test_a_ticket_the_twins_make_is_a_ticket():
    log = MemoryLog()
    journal = Journal(log)
    log.append(records.IDMARK, records.idmark(1, 1), True)
    ticket = lane.settled_since(journal, 0)
    assert ticket == Ticket(1, True, True) and type(ticket) is Ticket and ticket.own
    ticket = lane.ticket_since(journal, 0)
    assert ticket == Ticket(1, True) and type(ticket) is Ticket and ticket.fsync


def test_a_journal_without_a_log_or_with_other_methods_has_them_called():
    assert lane.settled_since(Journal(), 0) is None and lane.ticket_since(Journal(), 0) is None
    asked = []
    journal = Journal(MemoryLog())
    journal.settled_since = lambda mark, claim_at=None: asked.append(("settled", mark, claim_at)) or "s"
    journal.ticket_since = lambda mark: asked.append(("ticket", mark)) or "t"
    assert lane.settled_since(journal, 3, 7) == "s" and lane.ticket_since(journal, 4) == "t"
    assert asked == [("settled", 3, 7), ("ticket", 4)]
