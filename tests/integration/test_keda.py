"""conf/keda-scaledobject.yaml against a live daemon: the URL its
``metrics-api`` trigger reads answers JSON (``GET /api/queues/<q>``, with the
Basic credentials of its TriggerAuthentication's Secret, an ACL user that can
only read), and the value at its ``valueLocation`` is the queue's backlog,
as KEDA would read it.  Also the API's other answers: every queue, 401
without credentials, 404 for a missing queue, 405 for a POST."""

from __future__ import annotations

import json
import urllib.parse

import pytest
import yaml
from harness import ROOT
from harness_http import http_daemon, http_get

EXAMPLE = ROOT / "conf" / "keda-scaledobject.yaml"


def objects() -> dict:
    return {d["kind"]: d for d in yaml.safe_load_all(EXAMPLE.read_text(encoding="utf-8"))}


def credentials() -> tuple[str, str]:
    secret = objects()["Secret"]["stringData"]
    refs = {r["parameter"]: r["key"] for r in objects()["TriggerAuthentication"]["spec"]["secretTargetRef"]}
    return secret[refs["username"]], secret[refs["password"]]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    """leaseq with a password and the read-only user the example's comment asks for."""
    tmp = tmp_path_factory.mktemp("keda")
    user, password = credentials()
    conf = tmp / "leaseq.conf"
    conf.write_text(f"user {user} on >{password} ~* +@read\n")
    d = http_daemon(tmp / "data", args=("--config", str(conf), "--requirepass", "secret"))
    yield d
    d.kill()


def test_the_scaled_object_reads_the_backlog_of_its_queue(daemon):
    trigger = objects()["ScaledObject"]["spec"]["triggers"][0]
    assert trigger["type"] == "metrics-api" and trigger["metadata"]["authMode"] == "basic"
    assert trigger["authenticationRef"]["name"] == objects()["TriggerAuthentication"]["metadata"]["name"]
    url = urllib.parse.urlsplit(trigger["metadata"]["url"])
    queue = url.path.rsplit("/", 1)[1]
    c = daemon.client(password="secret")
    c.execute_command("QPUSHMANY", queue, 7, *["x"] * 7)
    c.execute_command("QCLAIM", queue, "w", "COUNT", 2)
    status, ctype, body = http_get(daemon, url.path, user=credentials())
    assert (status, ctype) == (200, "application/json")
    value = json.loads(body)
    for key in trigger["metadata"]["valueLocation"].split("."):      # a GJSON path of plain keys
        value = value[key]
    assert value == 5 == c.execute_command("QLEN", queue)
    assert json.loads(body)["in_flight"] == 2 and json.loads(body)["name"] == queue


def test_the_api_lists_every_queue_as_qinfo_shows_it(daemon):
    c = daemon.client(password="secret", protocol=3)
    c.execute_command("QCREATE", "api-b", "MAXDELIVERIES", 3)
    c.execute_command("QPUSH", "api-a", "x")
    status, _, body = http_get(daemon, "/api/queues", user=credentials())
    listed = {q["name"]: q for q in json.loads(body)["queues"]}
    assert status == 200 and {"api-a", "api-b"} <= set(listed)
    assert listed["api-b"]["maxdeliveries"] == 3 and listed["api-a"]["ready"] == 1
    qinfo = {k.decode(): (v.decode() if isinstance(v, bytes) else v)
             for k, v in c.execute_command("QINFO", "api-a").items()}
    moving = "oldest_ready_age_ms"                                     # (read a moment apart)
    assert {k: v for k, v in listed["api-a"].items() if k != moving} == {k: v for k, v in qinfo.items() if k != moving}
    assert list(listed["api-a"]) == list(qinfo)                        # the same fields, in QINFO's order


@pytest.mark.parametrize("path, user, method, want", [
    ("/api/queues", None, "GET", (401, "user name and password")),
    ("/api/queues/nope", "keda", "GET", (404, "no such queue 'nope'")),
    ("/api/queues", "keda", "POST", (405, "only GET")),
    ("/api/queues", ("keda", "wrong"), "GET", (401, "")),
])
def test_the_api_refuses_what_it_cannot_answer(daemon, path, user, method, want):
    user = credentials() if user == "keda" else user
    status, _, body = http_get(daemon, path, method, user)
    assert status == want[0] and want[1] in body
