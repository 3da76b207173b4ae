"""The monitoring kit in conf/ (docs/operations.md, "Monitoring kit"): a
Grafana dashboard and Prometheus alert rules that use only metric names the
daemon exports, and the Kubernetes example that carries them.

A dashboard or an alert naming a metric that does not exist shows an empty
panel or never fires, silently; so every PromQL expression of both files is
read, every ``leaseq_`` name in it picked out, and each one looked up among
the sample names of a live daemon's /metrics, after enough work that every
series exists (a histogram with samples, a dead letter).  A name must be a
sample name as written: ``leaseq_queue_pushed_total``, not the family
``leaseq_queue_pushed``; ``leaseq_wal_fsync_duration_seconds_bucket``, not
the histogram's bare name.

The ConfigMaps of conf/k8s-sidecar.yaml hold copies of the two files, checked
equal byte for byte so they cannot drift apart.  The metrics added for the
kit are checked for what they say: the oldest ready job's age on the
daemon's clock, and a disk fault (``DEBUG FAULT``) counted and shown as a log
that cannot be written.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from harness import as_map, error_text, unique, wait_for
from harness_http import http_daemon, http_get

CONF = pathlib.Path(__file__).resolve().parents[2] / "conf"
DASHBOARD = CONF / "grafana-dashboard.json"
ALERTS = CONF / "prometheus-alerts.yaml"
K8S = CONF / "k8s-sidecar.yaml"
DEBUG = {"LEASEQ_ENABLE_DEBUG_COMMAND": "yes"}

PANELS = {"Backlog (ready + delayed)", "Push, ack, nack and dead-letter rates", "Oldest ready age", "In flight",
          "Dead letters", "Throttled by reason", "Fsync latency", "Log writable"}
ALERT_NAMES = {"LeaseqBacklogGrowing", "LeaseqOldestReadyAge", "LeaseqDeadLettersRising", "LeaseqLogWriteErrors",
               "LeaseqFsyncSlow"}


# -- reading the files ------------------------------------------------------------------------------

def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def alert_rules() -> list[dict]:
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def panels(board: dict) -> list[dict]:
    """Every panel, those inside rows too."""
    out = []
    for p in board["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def variable_queries(board: dict) -> list[str]:
    """The PromQL of the templating variables (a string, or the query
    editor's ``{"query": ...}``) and their ``definition``."""
    out = []
    for v in board["templating"]["list"]:
        if v["type"] != "query":
            continue
        query = v["query"]
        out.append(query["query"] if isinstance(query, dict) else query)
        out.append(v["definition"])
    return out


def expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every expression of the dashboard and the rules."""
    board = dashboard()
    found = [(f"panel {p['title']!r}", t["expr"]) for p in panels(board) for t in p.get("targets", [])]
    found += [("templating", q) for q in variable_queries(board)]
    found += [(f"alert {r['alert']}", r["expr"]) for r in alert_rules()]
    return found


def metric_names(promql: str) -> set[str]:
    """The ``leaseq_`` metric names a PromQL expression selects: identifiers,
    outside quoted strings (label values, which may hold anything) and
    comments."""
    code = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', promql)
    code = re.sub(r"#[^\n]*", "", code)
    return set(re.findall(r"(?<![\w:$])leaseq_[A-Za-z0-9_:]*", code))


def sample_names(text: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def metrics(d) -> str:
    status, _ctype, text = http_get(d, "/metrics")
    assert status == 200
    return text


# -- a live daemon ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def web(tmp_path_factory):
    d = http_daemon(tmp_path_factory.mktemp("kit") / "data", env=DEBUG)
    yield d
    d.stop()


@pytest.fixture(scope="module")
def exposition(web) -> str:
    """/metrics after pushes, claims, an ack, a nack, a dead letter, a job
    left in flight, a paused queue and a schedule: every series the kit
    reads exists, the histograms with samples."""
    c = web.client()
    c.execute_command("QPUSHMANY", "kit", 4, "a", "b", "c", "d")
    tokens = [as_map(j)[b"lease"] for j in c.execute_command("QCLAIM", "kit", "w", "COUNT", 3)]
    assert c.execute_command("QACK", "kit", tokens[0]) == 1
    assert c.execute_command("QNACK", "kit", tokens[1], "DELAY", 60_000) == 1
    assert c.execute_command("QNACK", "kit", tokens[2], "DEAD", "ERROR", "boom") == 1
    c.execute_command("QPUSH", "kit", "e")
    c.execute_command("QCLAIM", "kit", "w")                               # stays in flight
    c.execute_command("QCREATE", "kit-held")
    c.execute_command("QPUSH", "kit-held", "x")
    c.execute_command("QPAUSE", "kit-held")
    text = metrics(web)
    m = samples(text)
    kit = (("queue", "kit"),)
    assert {state: m[("leaseq_queue_jobs", kit + (("state", state),))]
            for state in ("ready", "delayed", "in_flight", "dead")} == {"ready": 1, "delayed": 1, "in_flight": 1,
                                                                       "dead": 1}
    assert m[("leaseq_queue_dead_lettered_total", kit)] == 1
    assert m[("leaseq_queue_throttled", (("queue", "kit-held"), ("reason", "pause")))] == 1
    assert m[("leaseq_wal_fsync_duration_seconds_count", ())] >= 1
    assert m[("leaseq_wal_fsync_duration_seconds_bucket", (("le", "+Inf"),))] >= 1
    return text


# -- every name the kit uses is exported ------------------------------------------------------------

def test_every_metric_name_in_the_dashboard_and_the_alerts_is_exported(exposition):
    exported = sample_names(exposition)
    used: dict[str, list[str]] = {}
    for where, promql in expressions():
        for name in metric_names(promql):
            used.setdefault(name, []).append(where)
    missing = {name: places for name, places in used.items() if name not in exported}
    assert not missing, f"not in /metrics: {missing}"
    # the kit covers what the issue asks for (and the extraction found them)
    assert used.keys() >= {"leaseq_queue_jobs", "leaseq_queue_pushed_total", "leaseq_queue_acked_total",
                           "leaseq_queue_nacked_total", "leaseq_queue_dead_lettered_total",
                           "leaseq_queue_oldest_ready_age_seconds", "leaseq_queue_throttled",
                           "leaseq_wal_fsync_duration_seconds_bucket", "leaseq_wal_writable",
                           "leaseq_wal_write_errors_total"}


def test_the_name_check_takes_sample_names_only(exposition):
    exported = sample_names(exposition)
    assert metric_names('sum by (le) (rate(leaseq_wal_fsync_duration_seconds_bucket{x="leaseq_no"}[5m]))') == \
        {"leaseq_wal_fsync_duration_seconds_bucket"}
    assert metric_names("label_values(leaseq_queue_jobs, queue)") == {"leaseq_queue_jobs"}
    # a family's name is not a sample name: a kit using it would show nothing
    assert "leaseq_wal_fsync_duration_seconds" not in exported
    assert "leaseq_queue_pushed" not in exported
    assert {"leaseq_wal_fsync_duration_seconds_bucket", "leaseq_wal_fsync_duration_seconds_sum",
            "leaseq_wal_fsync_duration_seconds_count", "leaseq_queue_pushed_total"} <= exported


# -- the files' shape -------------------------------------------------------------------------------

def test_the_dashboard_has_its_variables_and_panels():
    board = dashboard()
    assert board["schemaVersion"] >= 39 and board["uid"] == "leaseq"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == ("datasource", "prometheus")
    queue = variables["queue"]
    assert queue["type"] == "query"
    assert re.fullmatch(r"label_values\(leaseq_queue_jobs(\{[^}]*\})?, queue\)", queue["query"]["query"])
    shown = panels(board)
    assert {p["title"] for p in shown} >= PANELS
    assert len({p["id"] for p in shown}) == len(shown)
    for p in shown:
        if p["type"] == "row":
            continue
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", p["title"]
    by_title = {p["title"]: p for p in shown}
    fsync = [t["expr"] for t in by_title["Fsync latency"]["targets"]]
    assert [e.split(",")[0] for e in fsync] == ["histogram_quantile(0.5", "histogram_quantile(0.99"]
    rates = " ".join(t["expr"] for t in by_title["Push, ack, nack and dead-letter rates"]["targets"])
    for counter in ("pushed", "acked", "nacked", "dead_lettered"):
        assert f"rate(leaseq_queue_{counter}_total" in rates
    backlog = by_title["Backlog (ready + delayed)"]["targets"][0]["expr"]
    assert 'state=~"ready|delayed"' in backlog and '$queue' in backlog


def test_every_alert_has_an_expression_a_duration_a_severity_and_words():
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    assert [g["name"] for g in doc["groups"]] == ["leaseq"]
    rules = alert_rules()
    assert {r["alert"] for r in rules} == ALERT_NAMES
    for r in rules:
        assert r["expr"].strip() and re.fullmatch(r"\d+[smh]", r["for"]), r["alert"]
        assert r["labels"]["severity"] in ("warning", "critical"), r["alert"]
        assert r["annotations"]["summary"].strip(), r["alert"]
        assert "starting point" in r["annotations"]["description"], r["alert"]
    by_name = {r["alert"]: r for r in rules}
    assert "> 300" in by_name["LeaseqOldestReadyAge"]["expr"] and by_name["LeaseqOldestReadyAge"]["for"] == "5m"
    assert "histogram_quantile(0.99" in by_name["LeaseqFsyncSlow"]["expr"]
    assert "leaseq_wal_writable == 0" in by_name["LeaseqLogWriteErrors"]["expr"]


def test_the_kubernetes_example_carries_the_kit_unchanged():
    docs = [d for d in yaml.safe_load_all(K8S.read_text(encoding="utf-8")) if d]
    maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    rules, board = maps["leaseq-prometheus-rules"], maps["leaseq-grafana-dashboard"]
    assert rules["data"] == {"leaseq-alerts.yaml": ALERTS.read_text(encoding="utf-8")}, \
        "copy conf/prometheus-alerts.yaml into the leaseq-prometheus-rules ConfigMap"
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert board["data"] == {"leaseq.json": DASHBOARD.read_text(encoding="utf-8")}, \
        "copy conf/grafana-dashboard.json into the leaseq-grafana-dashboard ConfigMap"
    # Prometheus finds the pod's /metrics on the HTTP listener's port
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]
    annotations = pod["metadata"]["annotations"]
    leaseq = next(c for c in pod["spec"]["initContainers"] if c["name"] == "leaseq")
    env = {e["name"]: e.get("value") for e in leaseq["env"]}
    ports = {p["name"]: p["containerPort"] for p in leaseq["ports"]}
    assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": env["LEASEQ_HTTP_PORT"],
                           "prometheus.io/path": "/metrics"}
    assert ports["http"] == int(env["LEASEQ_HTTP_PORT"])


# -- the metrics added for the kit ------------------------------------------------------------------

def test_oldest_ready_age_follows_the_daemons_clock(web):
    c = web.client()
    q = unique("aged")
    assert c.execute_command("DEBUG", "CLOCK", "FREEZE") == b"OK"
    try:
        c.execute_command("QCREATE", q)
        age = ("leaseq_queue_oldest_ready_age_seconds", (("queue", q),))
        assert samples(metrics(web))[age] == 0                             # nothing ready
        c.execute_command("QPUSH", q, "first")
        assert c.execute_command("DEBUG", "CLOCK", "ADVANCE", 7_000) == b"OK"
        c.execute_command("QPUSH", q, "second")
        assert samples(metrics(web))[age] == 7.0                           # the first one's wait
        assert c.execute_command("DEBUG", "CLOCK", "ADVANCE", 2_500) == b"OK"
        assert samples(metrics(web))[age] == 9.5
        c.execute_command("QCLAIM", q, "w")                                # takes the first
        assert samples(metrics(web))[age] == 2.5
        assert as_map(c.execute_command("QINFO", q))[b"oldest_ready_age_ms"] == 2_500   # as QINFO says
    finally:
        c.execute_command("DEBUG", "CLOCK", "RESUME")


def test_the_log_is_writable_and_has_had_no_faults(web):
    m = samples(metrics(web))
    assert m[("leaseq_wal_writable", ())] == 1
    assert m[("leaseq_wal_write_errors_total", ())] == 0


def test_a_disk_fault_is_counted_and_shows_as_an_unwritable_log(tmp_path):
    d = http_daemon(tmp_path / "data", env=DEBUG)
    try:
        c = d.client()
        c.execute_command("QPUSH", "q", "before")
        for n, (kind, errno_name) in enumerate((("WRITE", "ENOSPC"), ("FSYNC", "EIO")), start=1):
            assert c.execute_command("DEBUG", "FAULT", kind, errno_name) == b"OK"
            assert error_text(c, "QPUSH", "q", "lost").startswith("MISCONF")
            assert error_text(c, "QPUSH", "q", "refused").startswith("MISCONF")      # the same fault
            m = samples(metrics(d))
            assert (m[("leaseq_wal_writable", ())], m[("leaseq_wal_write_errors_total", ())]) == (0, n)
            assert c.info("persistence")["log_write_status"] == "err"
            assert c.execute_command("DEBUG", "FAULT", kind, "NONE") == b"OK"
            wait_for(lambda: samples(metrics(d))[("leaseq_wal_writable", ())] == 1, 10, "writes to resume")
            assert samples(metrics(d))[("leaseq_wal_write_errors_total", ())] == n    # a counter: it stays
            assert c.info("persistence")["log_write_status"] == "ok"
    finally:
        d.stop()
