"""The status page, ``GET /`` on the HTTP listener (docs/operations.md,
"Status page"): what it shows after real traffic, that user data in it is
escaped, that it needs nothing from the network, and that a real browser
(headless Chromium) renders it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from harness import claim, unique, wait_for
from harness_http import Tables, http_daemon, http_get

HOSTILE_NAME = "<script>alert(1)</script>"
HOSTILE_ERROR = "disk <b>full</b> & 'quoted'"


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    d = http_daemon(tmp_path_factory.mktemp("status") / "data", env={"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"})
    yield d
    d.stop()


def table_rows(page: str, first_header: str, title: str) -> list[dict]:
    """The rows of the table titled ``title`` (its <h2> starts with it and
    its first column is ``first_header``), each as {column: text}."""
    t = Tables(page)
    for heading, table in zip([h for h in t.headings if h.startswith(("Queues", "Schedules", "Dead letters"))],
                              t.tables):
        if heading.startswith(title):
            header, *rows = table
            assert header[0] == first_header, header
            return [dict(zip(header, row)) for row in rows]
    raise AssertionError(f"no table {title!r} on the page")


def queue_rows(page: str) -> dict[str, dict]:
    return {row["queue"]: row for row in table_rows(page, "queue", "Queues")}


def dead_rows(page: str, queue: str) -> list[dict]:
    return [row for row in table_rows(page, "queue", "Dead letters") if row["queue"] == queue]


def page_of(d) -> str:
    status, ctype, page = http_get(d, "/")
    assert (status, ctype) == (200, "text/html; charset=utf-8")
    return page


def lease(job: dict) -> bytes:
    return job[b"lease"]


def test_the_page_shows_each_queues_counts_after_pushes_claims_acks_and_nacks(web):
    c = web.client()
    q = unique("page")
    c.execute_command("QPUSHMANY", q, 6, "a", "b", "c", "d", "e", "f")
    jobs = claim(c, q, "w", "COUNT", 4)
    c.execute_command("QACK", q, lease(jobs[0]))
    c.execute_command("QNACK", q, lease(jobs[1]), "DELAY", 60_000, "ERROR", "try later")
    c.execute_command("QNACK", q, lease(jobs[2]), "DEAD", "ERROR", "ERROR: bad payload")
    row = queue_rows(page_of(web))[q]
    assert {k: row[k] for k in ("ready", "delayed", "in flight", "dead", "completed", "durability")} == {
        "ready": "2", "delayed": "1", "in flight": "1", "dead": "1", "completed": "0", "durability": "fsync"}
    assert row["oldest ready"] != "–"                  # two jobs wait: their age is shown
    (dead,) = dead_rows(page_of(web), q)
    assert dead == {"queue": q, "job": str(jobs[2][b"id"]), "state": "dead", "from": "–", "reason": "nack",
                    "deliveries": "1", "last error": "ERROR: bad payload", "actions": "RetryDelete"}


def test_dead_letters_in_a_dead_letter_queue_show_where_they_came_from(web):
    c = web.client()
    q, dlq = unique("src"), unique("dlq")
    c.execute_command("QCREATE", q, "MAXDELIVERIES", 1, "DEADLETTER", dlq)
    c.execute_command("QPUSHMANY", q, 2, "x", "y")
    first, second = claim(c, q, "w", "COUNT", 2)
    c.execute_command("QNACK", q, lease(first), "DEAD", "ERROR", "no such customer")
    c.execute_command("QNACK", q, lease(second), "DELAY", 0, "ERROR", "timeout")
    assert claim(c, q, "w") == []                       # its second delivery would be one too many: DEAD
    rows = dead_rows(page_of(web), dlq)
    assert [(r["from"], r["reason"], r["deliveries"], r["last error"], r["state"]) for r in rows] == [
        (f"{q} #{second[b'id']}", "max-deliveries", "1", "timeout", "ready"),      # newest first
        (f"{q} #{first[b'id']}", "nack", "1", "no such customer", "ready"),
    ]
    assert queue_rows(page_of(web))[dlq]["ready"] == "2"


def test_a_queue_keeps_its_latest_five_dead_letters_on_the_page(web):
    c = web.client()
    q = unique("many-dead")
    c.execute_command("QPUSHMANY", q, 8, *"abcdefgh")
    for job in claim(c, q, "w", "COUNT", 8):
        c.execute_command("QNACK", q, lease(job), "DEAD", "ERROR", f"error {job[b'id']}")
    rows = dead_rows(page_of(web), q)
    assert [r["last error"] for r in rows] == [f"error {i}" for i in (8, 7, 6, 5, 4)]
    assert queue_rows(page_of(web))[q]["dead"] == "8"


def test_queue_names_and_errors_are_escaped(web):
    c = web.client()
    c.execute_command("QPUSH", HOSTILE_NAME, "x")
    job = claim(c, HOSTILE_NAME, "w")[0]
    c.execute_command("QNACK", HOSTILE_NAME, lease(job), "DEAD", "ERROR", HOSTILE_ERROR)
    page = page_of(web)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "disk &lt;b&gt;full&lt;/b&gt; &amp; &#x27;quoted&#x27;" in page
    assert "<script" not in page and "<b>full" not in page
    assert dead_rows(page, HOSTILE_NAME)[0]["last error"] == HOSTILE_ERROR     # a browser shows the text as sent
    assert HOSTILE_NAME in queue_rows(page)


def test_the_page_loads_nothing_from_elsewhere_and_refreshes_itself(web):
    web.client().execute_command("QPUSH", unique("plain"), "x")
    page = page_of(web)
    assert '<meta http-equiv="refresh" content="2; url=/">' in page
    for reference in ("http://", "https://", "src=", "href=", "url(", "@import", "<link", "<script", "<img"):
        assert reference not in page, reference


def test_rates_become_nonzero_under_a_push_and_ack_loop(web):
    """The daemon samples the counters once a second; the page's rate is the
    rise since the oldest sample of the last few seconds, so right after a
    steady loop it is about the loop's own rate."""
    c = web.client()
    q = unique("busy")
    started = time.monotonic()
    pushed = 0
    while time.monotonic() < started + 3 and pushed < 20_000:      # bounded by time and by count
        c.execute_command("QPUSHMANY", q, 10, *"0123456789")
        pushed += 10
        for job in claim(c, q, "w", "COUNT", 10):
            c.execute_command("QACK", q, lease(job))
        time.sleep(0.005)
    loop_rate = pushed / (time.monotonic() - started)
    row = queue_rows(page_of(web))[q]
    push_rate, ack_rate = (float(row[k].replace(",", "")) for k in ("push/s", "ack/s"))
    assert loop_rate / 2 <= push_rate <= loop_rate * 2, (push_rate, loop_rate)
    assert loop_rate / 2 <= ack_rate <= loop_rate * 2, (ack_rate, loop_rate)


def test_head_answers_like_get_without_a_body(web):
    with socket.create_connection(("127.0.0.1", web.http), timeout=10) as s:
        s.sendall(b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert lines[0] == "HTTP/1.1 200 OK"
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert int(headers["Content-Length"]) > 1000            # the size GET's page would have
    assert body == b""


def test_other_methods_and_paths_keep_their_answers(web):
    assert http_get(web, "/", "POST")[0] == 405
    status, _ctype, text = http_get(web, "/status")
    assert (status, text) == (404, "not found: try /, /healthz, /readyz, /metrics or /api/queues\n")
    assert http_get(web, "/?refresh=1")[0] == 200            # a query does not change the path


def test_the_log_and_snapshot_state_and_a_disk_error_show(web):
    c = web.client()
    c.execute_command("QPUSH", unique("snap"), "x")
    c.execute_command("BGSAVE")
    page = wait_for(lambda: (p := page_of(web)) and "ago, ok in" in p and p, 10, "the snapshot on the page")
    assert "<dt>segments</dt>" in page and "<dt>last fsync</dt>" in page
    assert '<span class="state ok">ready</span>' in page
    c.execute_command("DEBUG", "FAULT", "WRITE", "ENOSPC")
    try:
        with pytest.raises(Exception):
            c.execute_command("QPUSH", unique("faulty"), "x")
        page = page_of(web)
        assert '<span class="state bad">disk error</span>' in page
        assert "The log cannot be written: No space left on device" in page
    finally:
        c.execute_command("DEBUG", "FAULT", "WRITE", "NONE")
    wait_for(lambda: '<span class="state ok">ready</span>' in page_of(web), 10, "writes to resume")


def test_many_queues_are_listed_by_name_up_to_500_with_a_note(web):
    c = web.client()
    pipe = c.pipeline(transaction=False)
    for i in range(510):
        pipe.execute_command("QCREATE", f"bulk-{i:04d}")
    pipe.execute()
    page = page_of(web)
    names = list(queue_rows(page))
    assert len(names) == 500 and names == sorted(names, key=str.encode)
    total = int(Tables(page).headings[0].removeprefix("Queues").replace(",", ""))     # "Queues<span>512</span>"
    assert total >= 510
    assert f"The first 500 of {total:,} queues by name" in page


def test_each_queue_shows_its_flow_control_and_what_it_holds_back(web):
    c = web.client()
    # names that sort before the 510 bulk-NNNN queues of the test above: the page shows the first 500
    paused, limited, tenants, plain = unique("a-paused"), unique("a-limited"), unique("a-tenants"), unique("a-plain")
    c.execute_command("QPUSHMANY", paused, 2, "a", "b")
    c.execute_command("QPAUSE", paused)
    c.execute_command("QCREATE", limited, "RATE", 10, 1000, "CONCURRENCY", 4)
    c.execute_command("QPUSHMANY", limited, 6, *"abcdef")
    claim(c, limited, "w", "COUNT", 10)
    c.execute_command("QCREATE", tenants, "GROUP-CONCURRENCY", 1, "GROUP-RATE", 5, 1000)
    c.execute_command("QPUSHMANY", tenants, 3, "x", "y", "z", "GROUPS", "acme", "acme", "tiny")
    c.execute_command("QPAUSE", tenants, "GROUP", "tiny")
    c.execute_command("QPUSH", plain, "p")
    rows = queue_rows(page_of(web))
    assert rows[paused]["flow control"] == "paused · 2 throttled"
    assert rows[limited]["flow control"] == "rate 10 / 1.0 s · ≤ 4 in flight · 2 throttled"
    # acme may hand out 1 of its 2 (GROUP-CONCURRENCY 1), tiny none (paused)
    assert rows[tenants]["flow control"] == "per group ≤ 1, 5 / 1.0 s · 2 groups, 1 paused · 2 throttled"
    assert rows[plain]["flow control"] == "–"


def test_schedules_are_listed_with_their_next_and_last_tick_and_counts(web):
    c = web.client()
    q = unique("a-sched")                 # before the bulk-NNNN queues, as above
    c.execute_command("QSCHEDULE", q, "nightly", "x", "CRON", "0 2 * * *", "TZ", "Europe/Paris")
    rows = [r for r in table_rows(page_of(web), "queue", "Schedules") if r["queue"] == q]
    assert len(rows) == 1
    row = rows[0]
    assert (row["schedule"], row["when"], row["last"], row["fired"], row["skipped"]) == (
        "nightly", "CRON 0 2 * * * TZ Europe/Paris", "–", "0", "0")
    assert row["next"].startswith("in ")


def test_headless_chromium_renders_the_queues_and_their_counts(web, tmp_path):
    chromium = shutil.which("chromium")
    assert chromium, "the status page test needs Debian's chromium package: bin/test installs it when run as root"
    c = web.client()
    q = unique("browser")
    c.execute_command("QPUSHMANY", q, 3, "a", "b", "c")
    claim(c, q, "w")
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}",
                           "--dump-dom", f"http://127.0.0.1:{web.http}/"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    dom = done.stdout
    assert dom.startswith("<html") or dom.startswith("<!DOCTYPE"), dom[:200]
    assert "<title>leaseq: ready</title>" in dom
    row = queue_rows(dom)[q]
    assert {k: row[k] for k in ("ready", "in flight", "dead")} == {"ready": "2", "in flight": "1", "dead": "0"}


def test_while_recovering_the_page_says_loading_then_lists_the_queues(tmp_path):
    d = http_daemon(tmp_path / "data")
    try:
        pipe = d.client().pipeline(transaction=False)
        for _ in range(300):
            pipe.execute_command("QPUSHMANY", "big", 1000, *[b"x" * 64] * 1000)
        pipe.execute()
        d.kill()
        d.start(ready=False)                    # the HTTP listener opens before recovery starts
        pages: dict[str, str] = {}
        deadline = time.monotonic() + 60
        while "ready" not in pages and time.monotonic() < deadline:
            try:
                page = page_of(d)
            except OSError:                     # not listening yet
                time.sleep(0.005)
                continue
            pages[page.split("<title>leaseq: ", 1)[1].split("<", 1)[0]] = page
        assert set(pages) == {"loading", "ready"}, set(pages)
        assert "Recovering the data directory" in pages["loading"]
        assert "Listed once the data directory is recovered." in pages["loading"]
        assert queue_rows(pages["ready"])["big"]["ready"] == "300,000"
    finally:
        d.kill()
