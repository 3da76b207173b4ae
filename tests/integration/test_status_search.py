"""The status page's search and bulk actions (docs/operations.md, "Search
and bulk actions"): GET /search lists a queue's matches with their counts;
a bulk action is confirmed on a page naming the count, then runs in slices
(``search-slice`` small here, so every action takes several), each slice a
real command (logged: it survives kill -9), skipping jobs that changed
since the confirmation; every refusal is a 4xx and changes nothing.  The
screenshots are in test_status_browser.py's browser, below."""

from __future__ import annotations

import re
import urllib.parse

import pytest
import redis

from harness import (
    DEBUG_ENV,
    Daemon,
    as_map,
    claim_one,
    qget,
    unique,
    wait_for,
)
from harness_http import Tables, acl_daemon, csrf_of, http_daemon, ops_client, request

OPS = ("ops", "opspass")
VIEWER = ("viewer", "viewpass")
SLICE = 4


@pytest.fixture
def sliced(tmp_path):
    d = acl_daemon(tmp_path, LEASEQ_SEARCH_SLICE=str(SLICE))
    yield d
    d.kill()


def search(d, q: str, user=OPS, **filters) -> tuple[int, str]:
    status, _, page = request(d, "/search?" + urllib.parse.urlencode({"queue": q, **filters}), user=user)
    return status, page


def matches(page: str) -> list[dict]:
    tables = Tables(page).tables
    assert len(tables) == 1, "the search page has one table, its matches"
    header, *rows = tables[0]
    return [dict(zip(header, row)) for row in rows]


def match_count(page: str) -> int:
    return int(re.search(r'id="match-count">([\d,]+)<', page).group(1).replace(",", ""))


def confirm(d, q: str, action: str, user=OPS, token: str | None = None, **filters) -> tuple[int, str]:
    if token is None:
        token = csrf_of(search(d, q, user=user, **filters)[1])
    status, _, page = request(d, "/search/confirm", {"queue": q, "action": action, "csrf": token, **filters}, user)
    return status, page


def plan_of(page: str) -> str:
    return re.search(r'name="plan" value="([0-9a-f]+)"', page).group(1)


def act(d, confirmation: str, user=OPS) -> tuple[int, dict, str]:
    return request(d, "/search/act", {"plan": plan_of(confirmation), "csrf": csrf_of(confirmation)}, user)


def orders(c, q: str, n: int, customer: str) -> list[int]:
    return c.execute_command("QPUSHMANY", q, n, *[f"order:{customer}:{i}" for i in range(n)],
                             "META", "customer", customer)


def test_search_lists_the_matches_with_their_counts_a_page_at_a_time(sliced):
    c = ops_client(sliced)
    q = unique("shop")
    acme = orders(c, q, 60, "acme")
    globex = orders(c, q, 5, "globex")
    c.execute_command("QPUSH", q, "invoice:acme")
    for _ in range(2):
        job = claim_one(c, q, "w", "LEASE", 600_000)
        c.execute_command("QNACK", q, job[b"lease"], "ERROR", "card <declined>", "DEAD")
    status, page = search(sliced, q, match="order:*", meta_field="customer", meta="acme")
    assert status == 200
    assert match_count(page) == 60
    assert "ready 58 · dead 2;" in page and "66 jobs searched in 17 slices" in page
    rows = matches(page)
    assert [int(r["job"]) for r in rows] == acme[:50]
    assert rows[0]["state"] == "dead" and rows[0]["last error"] == "card <declined>"   # escaped on the page
    assert "card &lt;declined&gt;" in page
    assert rows[2]["payload"] == "order:acme:2" and rows[2]["META"] == "customer=acme"
    nxt = re.search(r'id="next-page" href="([^"]+)"', page).group(1).replace("&amp;", "&")
    rest = request(sliced, nxt, user=OPS)[2]
    assert [int(r["job"]) for r in matches(rest)] == acme[50:] and match_count(rest) == 60
    assert 'id="next-page"' not in rest
    # each filter alone, and the state
    assert match_count(search(sliced, q, meta_field="customer", meta="glob*")[1]) == 5
    assert match_count(search(sliced, q, error="card*")[1]) == 2
    assert match_count(search(sliced, q, match="*acme*", state="ready")[1]) == 59
    assert [int(r["job"]) for r in matches(search(sliced, q, match="order:globex:[0-1]")[1])] == globex[:2]
    page = search(sliced, q, match="nothing*")[1]
    assert match_count(page) == 0 and "No matches." in page and "/search/confirm" not in page
    # the status page links each queue to its search
    assert (f'<form class="act" method="get" action="/search"><input type="hidden" name="queue" value="{q}">'
            in request(sliced, "/", user=OPS)[2])


def test_the_confirmation_names_the_count_and_carries_the_token(sliced):
    c = ops_client(sliced)
    q = unique("conf")
    orders(c, q, 7, "acme")
    orders(c, q, 3, "globex")
    job = claim_one(c, q, "w")
    c.execute_command("QNACK", q, job[b"lease"], "DEAD")   # one acme match is dead: not cancellable
    status, page = confirm(sliced, q, "cancel", meta_field="customer", meta="acme")
    assert status == 200
    question = re.search(r'id="question">(.*?)</p>', page).group(1)
    assert re.sub("<[^>]+>", "", question) == f"Cancel 6 jobs matching META customer = acme in {q}?"
    assert "1 other match is already ended (completed, dead or cancelled): left as they are." in page
    assert plan_of(page) and csrf_of(page)
    assert 'id="confirm">Cancel 6 jobs</button>' in page
    # nothing changed by confirming
    assert c.execute_command("QLEN", q) == 9
    status, page = confirm(sliced, q, "retry", meta_field="customer", meta="acme")
    assert status == 200 and 'id="confirm">Retry 1 job</button>' in page
    status, page = confirm(sliced, q, "retry", meta_field="customer", meta="globex")
    assert status == 200 and "No job matching META customer = globex in" in page and "can be retried" in page
    assert 'name="plan"' not in page


def test_bulk_cancel_delete_and_retry_take_every_match_in_slices_and_survive_kill_9(sliced):
    c = ops_client(sliced)
    q = unique("bulk")
    acme = orders(c, q, 30, "acme")
    globex = orders(c, q, 10, "globex")
    errors = c.execute_command("QPUSHMANY", q, 9, *[f"thumb-{i}" for i in range(9)])
    # the acme orders first in claim order: claim all, then nack the thumbs dead
    claimed = [claim_one(c, q, "w", "LEASE", 600_000) for _ in range(49)]
    for job in claimed:
        if job[b"id"] in errors:
            c.execute_command("QNACK", q, job[b"lease"], "ERROR", f"PIL: cannot open {job[b'id']}", "DEAD")
        else:
            c.execute_command("QNACK", q, job[b"lease"])

    status, headers, body = act(sliced, confirm(sliced, q, "cancel", match="order:acme:*")[1])
    assert status == 303
    assert body == (f"Cancelled 30 of 30 jobs matching payload order:acme:* in {q} (QCANCEL, 8 slices); "
                    "0 skipped: changed since the confirmation.\n")
    assert headers["Location"].startswith("/search?queue=")
    shown = request(sliced, headers["Location"], user=OPS)[2]
    assert "Cancelled 30 of 30 jobs" in shown and 'id="notice"' in shown

    status, _, body = act(sliced, confirm(sliced, q, "delete", meta_field="customer", meta="globex")[1])
    assert status == 303 and body.startswith(f"Deleted 10 of 10 jobs matching META customer = globex in {q} "
                                              "(QDEL, 3 slices)")
    status, _, body = act(sliced, confirm(sliced, q, "retry", error="PIL:*")[1])
    assert status == 303 and body.startswith(f"Retried 9 of 9 jobs matching error PIL:* in {q} (QREDRIVE, 3 slices)")

    def states():
        return ([qget(c, q, i)[b"state"] for i in acme], [c.execute_command("QGET", q, i) for i in globex],
                [qget(c, q, i)[b"state"] for i in errors])
    expected = ([b"cancelled"] * 30, [None] * 10, [b"ready"] * 9)
    assert states() == expected
    sliced.kill()
    sliced.restart()
    c = ops_client(sliced)
    assert states() == expected
    log = sliced.log()
    for action, n in (("cancel", 30), ("delete", 10), ("retry", 9)):
        assert re.search(rf"status page: user ops from 127\.0\.0\.1 ran bulk {action} on {q} .*: {n} of {n} jobs", log)


def test_a_job_that_changes_between_confirmation_and_action_is_skipped(sliced):
    c = ops_client(sliced)
    q = unique("race")
    ids = orders(c, q, 10, "acme")
    confirmation = confirm(sliced, q, "delete", state="ready")[1]
    assert "Delete <b>10</b> jobs" in confirmation
    job = claim_one(c, q, "w")
    c.execute_command("QACK", q, job[b"lease"])             # acked (and kept as completed? gone): either way, skipped
    later = claim_one(c, q, "w")                             # claimed: in flight now, no longer "ready"
    c.execute_command("QPUSH", q, "order:acme:new")          # pushed after: not in what was confirmed
    status, _, body = act(sliced, confirmation)
    assert status == 303 and body.startswith(f"Deleted 8 of 10 jobs matching state ready in {q} (QDEL, 3 slices); "
                                             "2 skipped")
    assert qget(c, q, later[b"id"])[b"state"] == b"in_flight"
    assert c.execute_command("QLEN", q) == 1 and all(c.execute_command("QGET", q, i) is None for i in ids[2:])
    # a confirmation acts once
    status, _, body = act(sliced, confirmation)
    assert status == 409 and body.startswith("this confirmation is unknown or has expired")


def test_refusals_change_nothing(sliced):
    c = ops_client(sliced)
    q = unique("refuse")
    orders(c, q, 5, "acme")
    token = csrf_of(search(sliced, q)[1])
    # no token, a wrong one, another user's
    for bad in ("", "123.abc", csrf_of(search(sliced, q, user=VIEWER)[1])):
        status, _, body = request(sliced, "/search/confirm", {"queue": q, "action": "delete", "csrf": bad}, OPS)
        assert status == 403 and body.startswith("the form's CSRF token is missing, stale or not yours")
    confirmation = confirm(sliced, q, "delete", token=token)[1]
    status, _, body = request(sliced, "/search/act", {"plan": plan_of(confirmation)}, OPS)
    assert status == 403 and body.startswith("the form's CSRF token is missing")
    # the viewer may search but not act: the command's own refusal, nothing done
    status, page = search(sliced, q, user=VIEWER)
    assert status == 200 and match_count(page) == 5
    viewer_conf = confirm(sliced, q, "cancel", user=VIEWER)[1]
    status, _, body = act(sliced, viewer_conf, user=VIEWER)
    assert status == 403 and body.startswith("NOPERM User viewer has no permissions to run the 'qcancel' command")
    # another user's confirmation is not yours
    status, _, body = request(sliced, "/search/act", {"plan": plan_of(confirmation),
                                                       "csrf": csrf_of(viewer_conf)}, VIEWER)
    assert status == 409
    # bad searches
    for filters, code, start in (({"state": "gone"}, 400, "state must be one of"),
                                 ({"meta_field": "customer"}, 400, "a META filter needs both"),
                                 ({"match": "x" * 1025}, 400, "a MATCH, META or ERROR pattern is at most 1024"),
                                 ({"after": "x"}, 400, "after must be a job id")):
        status, body = search(sliced, q, **filters)
        assert (status, body[:len(start)]) == (code, start)
    status, body = search(sliced, "no-such-queue")
    assert (status, body) == (404, "no such queue 'no-such-queue'\n")
    assert request(sliced, "/search", user=OPS)[:3:2] == (400, "the search names no queue\n")
    status, _, body = request(sliced, "/search/confirm", {"queue": q, "action": "explode", "csrf": token}, OPS)
    assert (status, body) == (400, "action must be one of cancel, delete, retry\n")
    assert request(sliced, "/search/act", user=OPS)[0] == 405
    assert request(sliced, "/search?queue=" + q)[0] == 401                     # no credentials
    assert c.execute_command("QLEN", q) == 5
    status, _, body = request(sliced, "/search/act", {"plan": plan_of(confirmation), "csrf": token}, OPS)
    assert status == 303 and body.startswith("Deleted 5 of 5 jobs")


def test_search_slice_must_be_at_least_one(sliced):
    c = ops_client(sliced)
    with pytest.raises(redis.ResponseError, match="search-slice"):
        c.config_set("search-slice", 0)
    assert c.config_get("search-slice") == {"search-slice": str(SLICE)}


def test_retry_dead_matches_of_a_dead_letter_queue_sends_them_back_to_their_source(sliced):
    c = ops_client(sliced)
    q, dlq = unique("src"), unique("dlq")
    c.execute_command("QCREATE", q, "DEADLETTER", dlq)
    c.execute_command("QPUSHMANY", q, 6, *[f"mail-{i}" for i in range(6)])
    for i in range(6):
        job = claim_one(c, q, "w", "LEASE", 600_000)
        c.execute_command("QNACK", q, job[b"lease"], "DEAD", "ERROR", "smtp 550" if i % 2 else "smtp 421")
    assert c.execute_command("QLEN", dlq) == 6 and c.execute_command("QLEN", q) == 0
    confirmation = confirm(sliced, dlq, "retry", error="smtp 550")[1]
    assert f"Retry <b>3</b> jobs matching <span class=\"mono\">error smtp 550</span> in" in confirmation
    status, _, body = act(sliced, confirmation)
    assert status == 303 and body.startswith(f"Retried 3 of 3 jobs matching error smtp 550 in {dlq} (QREDRIVE, 1 slice)")
    assert c.execute_command("QLEN", q) == 3 and c.execute_command("QLEN", dlq) == 3
    back = [as_map(j)[b"payload"] for j in c.execute_command("QPEEK", q, "COUNT", 10)]   # (new ids there)
    assert sorted(back) == [b"mail-1", b"mail-3", b"mail-5"]


def test_a_match_s_age_is_on_the_daemon_s_clock(tmp_path):
    """As on the status page, a job's age is the daemon's now less its
    enqueue time: five hours on the DEBUG clock make it five hours old."""
    d = acl_daemon(tmp_path, **DEBUG_ENV)
    try:
        c = ops_client(d)
        q = unique("aged")
        c.execute_command("DEBUG", "CLOCK", "FREEZE")
        c.execute_command("QPUSH", q, "old")
        c.execute_command("DEBUG", "CLOCK", "ADVANCE", 5 * 3_600_000 + 7 * 60_000)
        c.execute_command("QPUSH", q, "new")
        assert [(r["payload"], r["age"]) for r in matches(search(d, q)[1])] == [("old", "5 h 7 min"),
                                                                                ("new", "0 ms")]
    finally:
        d.kill()


def test_a_replica_searches_but_its_bulk_buttons_are_disabled_and_an_action_is_refused(tmp_path):
    primary = Daemon(str(tmp_path / "primary")).start()
    replica = http_daemon(tmp_path / "replica", args=("--replicaof", f"127.0.0.1 {primary.port}"))
    try:
        primary.client().execute_command("QPUSHMANY", "q", 3, "a1", "a2", "b1")
        # (QLEN of a queue the replica does not have yet is NOQUEUE: EXISTS first)
        wait_for(lambda: replica.client().execute_command("EXISTS", "q") == 1
                 and replica.client().execute_command("QLEN", "q") == 3, 20, "the jobs on the replica")
        assert '<button type="submit" title="Search: q">Search</button>' in request(replica, "/")[2]
        status, page = search(replica, "q", user=None, match="a*")
        assert status == 200 and match_count(page) == 2
        bulk = re.findall(r'<button type="submit" class="danger"[^>]*>', page)
        assert len(bulk) == 3 and all("disabled" in b and "use the primary" in b for b in bulk), bulk
        status, confirmation = confirm(replica, "q", "delete", user=None, token=csrf_of(page), match="a*")
        assert status == 200
        status, _, body = act(replica, confirmation, user=None)
        assert (status, body) == (503, "READONLY You can't write against a read only replica. (after 0 jobs deleted)\n")
        assert primary.client().execute_command("QLEN", "q") == 3
    finally:
        replica.kill()
        primary.kill()
