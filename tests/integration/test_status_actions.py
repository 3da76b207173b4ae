"""The status page's actions (docs/operations.md, "Status page actions"):
POSTs with a CSRF token, run as an ACL user (HTTP Basic, the RESP users and
passwords, the same command permissions), from loopback only when no
password is set; every refusal is a 4xx with a sentence and changes
nothing; every action is logged with its user.  The browser half (clicks in
headless Chromium) is in test_status_browser.py."""

from __future__ import annotations

import base64
import re
import urllib.error
import urllib.parse
import urllib.request

import pytest

from harness import (
    Daemon,
    claim_one,
    qget,
    qinfo,
    unique,
    wait_for,
)
from harness_http import acl_daemon, csrf_of, http_daemon, ops_client, request


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    d = acl_daemon(tmp_path_factory.mktemp("secured"))
    yield d
    d.kill()


def queue_with_a_job(d, prefix: str):
    """(an ops client, a new queue holding one ready job)."""
    c = ops_client(d)
    q = unique(prefix)
    c.execute_command("QPUSH", q, "x")
    return c, q


def page_and_token(d, user):
    status, _, page = request(d, "/", user=user)
    assert status == 200
    return page, csrf_of(page)


def test_viewing_needs_a_user_when_the_default_user_has_a_password(secured):
    status, headers, body = request(secured, "/")
    assert status == 401 and headers["WWW-Authenticate"].startswith('Basic realm="leaseq"')
    assert body == "the status page needs a user name and password (an ACL user)\n"
    assert request(secured, "/", user=("ops", "wrong"))[0] == 401
    assert request(secured, "/", user=("viewer", "viewpass"))[0] == 200
    assert request(secured, "/metrics")[0] == 200 and request(secured, "/healthz")[0] == 200


def test_pause_and_resume_as_a_user_allowed_to(secured):
    c, q = queue_with_a_job(secured, "pz")
    _, token = page_and_token(secured, ("ops", "opspass"))
    status, headers, body = request(secured, "/action/pause", {"queue": q, "csrf": token}, ("ops", "opspass"))
    assert (status, body) == (303, f"Paused queue {q}.\n")
    assert headers["Location"] == "/?done=" + urllib.parse.quote(f"Paused queue {q}.")
    assert qinfo(c, q)[b"paused"] == 1
    page = request(secured, headers["Location"], user=("ops", "opspass"))[2]
    assert f"Paused queue {q}." in page and f'action="/action/resume"' in page
    assert request(secured, "/action/resume", {"queue": q, "csrf": token}, ("ops", "opspass"))[0] == 303
    assert qinfo(c, q)[b"paused"] == 0
    assert f"status page: user ops from 127.0.0.1 ran QPAUSE {q}: b'OK'" in secured.log()


def test_a_user_without_the_permission_gets_403_and_nothing_changes(secured):
    c, q = queue_with_a_job(secured, "noperm")
    _, token = page_and_token(secured, ("viewer", "viewpass"))
    status, _, body = request(secured, "/action/pause", {"queue": q, "csrf": token}, ("viewer", "viewpass"))
    assert status == 403
    assert body == "NOPERM User viewer has no permissions to run the 'qpause' command\n"
    assert qinfo(c, q)[b"paused"] == 0


def test_a_stale_missing_or_foreign_csrf_token_is_refused(secured):
    c, q = queue_with_a_job(secured, "csrf")
    _, viewer_token = page_and_token(secured, ("viewer", "viewpass"))
    _, token = page_and_token(secured, ("ops", "opspass"))
    issued, mac = token.split(".")
    for bad in ("", "garbage", f"{int(issued) - 7200}.{mac}", f"{issued}.{'0' * len(mac)}", viewer_token):
        status, _, body = request(secured, "/action/pause", {"queue": q, "csrf": bad}, ("ops", "opspass"))
        assert status == 403 and body.startswith("the form's CSRF token is missing, stale or not yours"), bad
    status, _, _ = request(secured, "/action/pause", {"queue": q}, ("ops", "opspass"))
    assert status == 403
    assert qinfo(c, q)[b"paused"] == 0


def test_a_token_of_an_earlier_run_is_stale(tmp_path):
    d = acl_daemon(tmp_path)
    try:
        c = ops_client(d)
        c.execute_command("QPUSH", "q", "x")
        _, token = page_and_token(d, ("ops", "opspass"))
        d.kill()
        d.restart()
        status, _, body = request(d, "/action/pause", {"queue": "q", "csrf": token}, ("ops", "opspass"))
        assert status == 403 and "CSRF" in body
        assert qinfo(ops_client(d), "q")[b"paused"] == 0
    finally:
        d.kill()


def test_bad_requests_answer_4xx_with_a_sentence(secured):
    c, q = queue_with_a_job(secured, "bad")
    ops = ("ops", "opspass")
    _, token = page_and_token(secured, ops)
    status, _, body = request(secured, "/action/explode", {"queue": q, "csrf": token}, ops)
    assert (status, body) == (404, "no such action 'explode'; the actions are pause, resume, redrive, delete, "
                                   "purge-dead, cancel\n")
    assert request(secured, "/action/delete", {"queue": q, "csrf": token}, ops)[:3:2] == (
        400, "delete needs the id of a job\n")
    assert request(secured, "/action/pause", {"csrf": token}, ops)[:3:2] == (400, "the form names no queue\n")
    assert request(secured, "/action/pause", {"queue": unique("nosuch"), "csrf": token}, ops)[0] == 404
    assert request(secured, "/action/cancel", {"queue": q, "id": "x", "csrf": token}, ops)[:3:2] == (
        400, "ERR value is not an integer or out of range\n")
    status, _, body = request(secured, "/action/pause", raw_body=b"queue=a&queue=b&csrf=" + token.encode(), user=ops)
    assert (status, body) == (400, "a form field is given twice\n")
    status, _, body = request(secured, "/action/pause", {"queue": q, "csrf": token})
    assert status == 401                                          # no credentials, and a password is set
    assert qinfo(c, q)[b"paused"] == 0 and qinfo(c, q)[b"ready"] == 1


def test_get_on_an_action_is_405(secured):
    status, _, body = request(secured, "/action/pause", user=("ops", "opspass"))
    assert (status, body) == (405, "an action is a POST (a button of the status page)\n")


def test_redrive_delete_and_cancel_one_job_and_all_dead(secured):
    c = ops_client(secured)
    q = unique("dl")
    ops = ("ops", "opspass")
    ids = c.execute_command("QPUSHMANY", q, 5, "a", "b", "c", "d", "e")
    for _ in range(3):
        job = claim_one(c, q)
        c.execute_command("QNACK", q, job[b"lease"], "DEAD")
    dead = sorted(ids[:3])
    flying = claim_one(c, q)
    page, token = page_and_token(secured, ops)
    assert f'name="id" value="{flying[b"id"]}"' in page
    assert request(secured, "/action/redrive", {"queue": q, "id": dead[0], "csrf": token}, ops)[0] == 303
    assert qget(c, q, dead[0])[b"state"] == b"ready"
    assert request(secured, "/action/delete", {"queue": q, "id": dead[1], "csrf": token}, ops)[2] == \
        f"1 job deleted (QDEL job {dead[1]} of {q}).\n"
    assert c.execute_command("QGET", q, dead[1]) is None
    assert request(secured, "/action/cancel", {"queue": q, "id": flying[b"id"], "csrf": token}, ops)[2] == \
        f"1 job cancelled (QCANCEL job {flying[b'id']} of {q}).\n"
    assert qget(c, q, flying[b"id"])[b"state"] == b"cancelled"
    assert request(secured, "/action/purge-dead", {"queue": q, "csrf": token}, ops)[2] == \
        f"1 job deleted (QPURGE queue {q}).\n"
    assert qinfo(c, q)[b"dead"] == 0


def test_without_a_password_actions_come_only_from_loopback(tmp_path):
    d = http_daemon(tmp_path / "data")
    try:
        c = d.client(protocol=2)
        c.execute_command("QPUSH", "q", "x")
        page = request(d, "/")[2]
        status, _, body = request(d, "/action/pause", {"queue": "q", "csrf": csrf_of(page)})
        assert (status, body) == (303, "Paused queue q.\n")        # from 127.0.0.1, as the default user
        assert "status page: user default from 127.0.0.1 ran QPAUSE q" in d.log()
    finally:
        d.kill()


def test_actions_without_a_password_are_refused_from_beyond_loopback():
    """The rule itself (a test cannot send from another host: servers and
    clients stay on 127.0.0.1)."""
    from leaseq.daemon.actions import HttpError, require_loopback

    for peer in ("127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"):
        require_loopback(peer)
    for peer in ("10.1.2.3", "192.168.0.7", "::ffff:10.0.0.1"):
        with pytest.raises(HttpError) as e:
            require_loopback(peer)
        assert e.value.status == "403 Forbidden" and "only taken from the loopback interface" in e.value.message


def test_malformed_credentials_and_oversized_forms_are_refused(secured):
    c, q = queue_with_a_job(secured, "malformed")
    _, token = page_and_token(secured, ("ops", "opspass"))
    url = f"http://127.0.0.1:{secured.http}/action/pause"
    for header, want in (("Bearer abc", (401, "only HTTP Basic authentication is supported\n")),
                         ("Basic !!!notbase64", (400, "the Authorization header is not user:password in base64\n")),
                         ("Basic " + base64.b64encode(b"no-colon").decode(),
                          (400, "the Authorization header is not user:password in base64\n"))):
        req = urllib.request.Request(url, data=urllib.parse.urlencode({"queue": q, "csrf": token}).encode(),
                                     method="POST", headers={"Authorization": header})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                got = (r.status, r.read().decode())
        except urllib.error.HTTPError as e:
            got = (e.code, e.read().decode())
        assert got == want, header
    status, _, body = request(secured, "/action/pause", raw_body=b"queue=" + b"q" * 5000, user=("ops", "opspass"))
    assert (status, body) == (413, "a form is at most 4096 bytes\n")
    assert qinfo(c, q)[b"paused"] == 0


def test_a_replicas_page_shows_its_buttons_disabled_and_refuses_an_action_with_readonly(tmp_path):
    primary = Daemon(str(tmp_path / "primary")).start()
    replica = http_daemon(tmp_path / "replica", args=("--replicaof", f"127.0.0.1 {primary.port}"))
    try:
        primary.client().execute_command("QPUSH", "q", "x")
        wait_for(lambda: replica.client().execute_command("EXISTS", "q") == 1, 20, "the queue on the replica")
        page = request(replica, "/")[2]
        assert "A replica of 127.0.0.1:" in page
        buttons = re.findall(r"<button [^>]*>", page)
        actions = [b for b in buttons if 'type="submit" name="do"' in b]     # (the charts' range buttons only look)
        assert actions and all(" disabled " in b and "use the primary" in b for b in actions), buttons
        assert all('name="range"' in b or 'title="Search: ' in b for b in buttons if b not in actions), buttons   # (and Search, a read)
        status, _, body = request(replica, "/action/pause", {"queue": "q", "csrf": csrf_of(page)})
        assert (status, body) == (503, "READONLY You can't write against a read only replica.\n")
    finally:
        replica.kill()
        primary.kill()
