"""Users and permissions (docs/operations.md, "Users and permissions";
docs/semantics.md §7): users declared in the config file, AUTH and HELLO
AUTH, -NOAUTH / -WRONGPASS / -NOPERM worded as Redis words them, queue
patterns on every queue a command names, and ACL WHOAMI/LIST/USERS/CAT.
Every refusal leaves the refused connection usable and another client
served meanwhile."""

from __future__ import annotations

import hashlib
import subprocess

import pytest
import redis

from harness import LEASEQ, Daemon, RespSocket, as_map, claim_one, error_text, free_port, no_retry_client, qinfo, unique
from harness_tls import tls_env

APP_PASSWORD = "app-secret"
APP_HASH = hashlib.sha256(APP_PASSWORD.encode()).hexdigest()

CONFIG = f"""
requirepass admin-secret
# a worker: four job commands on the jobs:* queues
user worker on >w-secret ~jobs:* +qclaim +qack +qnack +qextend +qwork +@transaction +acl|whoami +subscribe
# an application: everything but administration, password given by its hash
user app on #{APP_HASH} ~* +@all -@admin
# a producer limited to email queues
user producer on >p-secret ~emails* +qpush +qcreate +qredrive +qlen +qinfo
# reads everything, writes only its own queues
user reader on >r-secret %R~* %W~reader:* +@read +qpush
user retired off >x-secret ~* +@all
user anyone on nopass ~open:* +qpush +qlen
user tools on >t-secret ~jobs:* +@keyspace
"""


@pytest.fixture(scope="module")
def acl_daemon(tmp_path_factory):
    base = tmp_path_factory.mktemp("acl")
    conf = base / "leaseq.conf"
    conf.write_text(CONFIG)
    d = Daemon(str(base / "data"), "--config", str(conf)).start()
    c = login(d, "default", "admin-secret")
    assert c.execute_command("QCREATE", "payroll") == b"OK"   # the queue a limited user is refused, in every test
    c.close()
    yield d
    d.stop()


def login(d: Daemon, user: str, password: str, **kw) -> redis.Redis:
    return d.client(username=user, password=password, **kw)


def first_reply(d: Daemon, *args):
    """The reply to one command on a new, unauthenticated connection (errors
    as their text); redis-py would fail on connect with CLIENT SETINFO."""
    c = RespSocket(d.port)
    try:
        c.send(*args)
        got = c.read()
        return str(got) if isinstance(got, Exception) else got
    finally:
        c.close()


@pytest.fixture
def admin(acl_daemon):
    c = login(acl_daemon, "default", "admin-secret")
    yield c
    c.close()


@pytest.fixture
def bystander(acl_daemon):
    """Another client that keeps pushing and claiming while refusals happen."""
    c = login(acl_daemon, "app", APP_PASSWORD)
    q = unique("bystander")

    def still_served():
        job_id = c.execute_command("QPUSH", q, "x")
        job = claim_one(c, q)
        assert job[b"id"] == job_id
        assert c.execute_command("QACK", q, job[b"lease"]) == 1

    still_served()
    yield still_served
    c.close()


def test_a_user_limited_to_a_pattern_is_refused_on_another_queue(acl_daemon, admin, bystander):
    admin.execute_command("QPUSH", "jobs:mail", "hello")
    admin.execute_command("QPUSH", "payroll", "secret")
    w = login(acl_daemon, "worker", "w-secret")
    job = claim_one(w, "jobs:mail")
    assert job[b"payload"] == b"hello"
    with pytest.raises(redis.exceptions.NoPermissionError) as e:
        w.execute_command("QCLAIM", "payroll", "w1")
    assert str(e.value) == "User worker has no permissions to access the 'payroll' queue"
    bystander()
    assert w.execute_command("QACK", "jobs:mail", job[b"lease"]) == 1     # the refused connection still works
    assert qinfo(admin, "payroll")[b"ready"] == 1                          # and nothing was claimed
    assert w.execute_command("ACL", "WHOAMI") == b"worker"


def test_a_command_outside_the_users_rules_is_refused(acl_daemon, bystander):
    w = login(acl_daemon, "worker", "w-secret")
    with pytest.raises(redis.exceptions.NoPermissionError) as e:
        w.execute_command("QPUSH", "jobs:mail", "x")
    assert str(e.value) == "User worker has no permissions to run the 'qpush' command"
    bystander()
    with pytest.raises(redis.exceptions.NoPermissionError, match="'config|get' command"):
        w.execute_command("CONFIG", "GET", "port")
    with pytest.raises(redis.exceptions.NoPermissionError, match="'acl|list' command"):
        w.execute_command("ACL", "LIST")
    assert w.execute_command("PING") is True           # commands allowed before AUTH are everyone's


def test_subcommands_follow_their_categories(acl_daemon, bystander):
    a = login(acl_daemon, "app", APP_PASSWORD)        # +@all -@admin
    assert isinstance(a.execute_command("CLIENT", "ID"), int)
    with pytest.raises(redis.exceptions.NoPermissionError, match="'client|list' command"):
        a.execute_command("CLIENT", "LIST")
    with pytest.raises(redis.exceptions.NoPermissionError, match="'config|get' command"):
        a.execute_command("CONFIG", "GET", "port")
    with pytest.raises(redis.exceptions.NoPermissionError, match="'shutdown' command"):
        a.execute_command("SHUTDOWN")
    bystander()
    assert a.execute_command("ACL", "WHOAMI") == b"app"


def test_wrong_password_unknown_and_disabled_users_get_wrongpass(acl_daemon, bystander):
    for user, password in (("worker", "nope"), ("nobody", "x"), ("retired", "x-secret")):
        with pytest.raises(redis.exceptions.AuthenticationError) as e:
            no_retry_client(acl_daemon, username=user, password=password).ping()
        assert "invalid username-password pair or user is disabled" in str(e.value)
        bystander()


def test_auth_switches_user_and_a_failed_auth_keeps_the_current_one(acl_daemon):
    c = RespSocket(acl_daemon.port)              # redis-py drops a connection after an auth error; this keeps it
    try:
        c.send("QLEN", "jobs:x")
        assert str(c.read()) == "NOAUTH Authentication required."
        for args, reply in [
            (("AUTH", "worker", "w-secret"), b"OK"),
            (("ACL", "WHOAMI"), b"worker"),
            (("AUTH", "app", "wrong"), "WRONGPASS invalid username-password pair or user is disabled."),
            (("ACL", "WHOAMI"), b"worker"),                         # a failed AUTH changes nothing
            (("AUTH", "admin-secret"), b"OK"),                       # bare AUTH: the default user
            (("ACL", "WHOAMI"), b"default"),
            (("AUTH", "anyone", "any password at all"), b"OK"),      # nopass
            (("QPUSH", "open:1", "x"), 1),
            (("QPUSH", "jobs:1", "x"), "NOPERM User anyone has no permissions to access the 'jobs:1' queue"),
        ]:
            c.send(*args)
            got = c.read()
            assert (str(got) if isinstance(got, Exception) else got) == reply, args
    finally:
        c.close()


def test_hello_auth_as_a_user(acl_daemon, bystander):
    c = acl_daemon.client(protocol=3, username="worker", password="w-secret")
    assert c.execute_command("ACL", "WHOAMI") == b"worker"
    assert first_reply(acl_daemon, "HELLO", "3", "AUTH", "worker", "bad") == (
        "WRONGPASS invalid username-password pair or user is disabled.")
    assert as_map(first_reply(acl_daemon, "HELLO", "3", "AUTH", "worker", "w-secret"))[b"proto"] == 3
    bystander()


def test_client_list_shows_and_client_kill_finds_the_user(acl_daemon, admin):
    w = login(acl_daemon, "worker", "w-secret")
    assert w.execute_command("ACL", "WHOAMI") == b"worker"
    listed = admin.execute_command("CLIENT", "LIST").decode()
    assert " user=worker " in listed
    assert admin.execute_command("CLIENT", "KILL", "USER", "worker") >= 1
    assert " user=worker " not in admin.execute_command("CLIENT", "LIST").decode()


def test_acl_list_shows_hashes_never_passwords(admin):
    lines = [ln.decode() for ln in admin.execute_command("ACL", "LIST")]
    text = "\n".join(lines)
    for secret in ("w-secret", "p-secret", "r-secret", "x-secret", "admin-secret", APP_PASSWORD):
        assert secret not in text
    worker = hashlib.sha256(b"w-secret").hexdigest()
    admin_hash = hashlib.sha256(b"admin-secret").hexdigest()
    assert lines == [
        f"user anyone on nopass ~open:* resetchannels -@all +qpush +qlen",
        f"user app on #{APP_HASH} ~* resetchannels +@all -@admin",
        f"user default on #{admin_hash} ~* resetchannels +@all",
        f"user producer on #{hashlib.sha256(b'p-secret').hexdigest()} ~emails* resetchannels -@all +qpush "
        f"+qcreate +qredrive +qlen +qinfo",
        f"user reader on #{hashlib.sha256(b'r-secret').hexdigest()} %R~* %W~reader:* resetchannels -@all "
        f"+@read +qpush",
        f"user retired off #{hashlib.sha256(b'x-secret').hexdigest()} ~* resetchannels +@all",
        f"user tools on #{hashlib.sha256(b't-secret').hexdigest()} ~jobs:* resetchannels -@all +@keyspace",
        f"user worker on #{worker} ~jobs:* resetchannels -@all +qclaim +qack +qnack +qextend +qwork "
        f"+@transaction +acl|whoami +subscribe",
    ]


def test_acl_users_and_cat(admin):
    assert admin.execute_command("ACL", "USERS") == [b"anyone", b"app", b"default", b"producer", b"reader",
                                                     b"retired", b"tools", b"worker"]
    cats = admin.execute_command("ACL", "CAT")
    assert {b"read", b"write", b"queue", b"admin", b"fast", b"slow", b"blocking", b"dangerous",
            b"connection", b"transaction", b"keyspace"} == set(cats)
    write = set(admin.execute_command("ACL", "CAT", "write"))
    assert {b"qpush", b"qack", b"qclaim"} <= write and b"qlen" not in write
    assert b"client|kill" in set(admin.execute_command("ACL", "CAT", "admin"))
    assert error_text(admin, "ACL", "CAT", "nosuch") == "Unknown category 'nosuch'"
    assert error_text(admin, "ACL", "SETUSER", "x").startswith("unknown subcommand 'SETUSER'")
    assert admin.execute_command("COMMAND", "INFO", "qpush")["qpush"]["acl_categories"] == [
        "@fast", "@queue", "@write"]


def test_read_and_write_patterns(acl_daemon, admin, bystander):
    admin.execute_command("QPUSH", "ledger", "x")
    r = login(acl_daemon, "reader", "r-secret")
    assert r.execute_command("QLEN", "ledger") == 1                # %R~*: reads anything
    assert r.execute_command("QPUSH", "reader:own", "x") >= 1      # %W~reader:*: writes its own
    with pytest.raises(redis.exceptions.NoPermissionError, match="'ledger' queue"):
        r.execute_command("QPUSH", "ledger", "x")
    bystander()
    assert r.execute_command("QLEN", "ledger") == 1


def test_qredrive_needs_every_source_queue_it_moves_jobs_to(acl_daemon, admin, bystander):
    dlq, source = unique("emails-dlq"), unique("payroll")
    admin.execute_command("QCREATE", source, "MAXDELIVERIES", "1", "DEADLETTER", dlq)
    admin.execute_command("QPUSH", source, "pay")
    job = claim_one(admin, source)
    admin.execute_command("QNACK", source, job[b"lease"], "DEAD")
    assert qinfo(admin, dlq)[b"ready"] == 1
    p = login(acl_daemon, "producer", "p-secret")
    with pytest.raises(redis.exceptions.NoPermissionError) as e:
        p.execute_command("QREDRIVE", dlq)
    assert str(e.value) == f"User producer has no permissions to access the '{source}' queue"
    bystander()
    assert qinfo(admin, dlq)[b"ready"] == 1 and qinfo(admin, source)[b"ready"] == 0     # nothing moved
    assert admin.execute_command("QREDRIVE", dlq) == 1


def test_a_deadletter_queue_named_in_qcreate_must_be_allowed(acl_daemon, admin, bystander):
    p = login(acl_daemon, "producer", "p-secret")
    q = unique("emails-in")
    with pytest.raises(redis.exceptions.NoPermissionError, match="'graveyard' queue"):
        p.execute_command("QCREATE", q, "DEADLETTER", "graveyard")
    bystander()
    assert q.encode() not in admin.execute_command("QLIST", "MATCH", q)
    assert p.execute_command("QCREATE", q, "DEADLETTER", q + "-dlq") == b"OK"
    assert qinfo(admin, q)[b"deadletter"] == (q + "-dlq").encode()


def test_a_refused_command_aborts_the_transaction(acl_daemon, admin):
    q = unique("jobs:t")
    admin.execute_command("QPUSH", q, "x")
    w = login(acl_daemon, "worker", "w-secret")
    pipe = w.pipeline(transaction=True)
    pipe.execute_command("QCLAIM", q, "w1")
    pipe.execute_command("QCLAIM", "elsewhere", "w1")
    with pytest.raises(redis.exceptions.NoPermissionError, match="'elsewhere' queue"):
        pipe.execute()               # EXEC answered -EXECABORT; redis-py raises the queued command's error
    assert qinfo(admin, q)[b"ready"] == 1          # the allowed claim did not run either
    assert w.execute_command("ACL", "WHOAMI") == b"worker"


def test_qwork_streams_only_from_allowed_queues(acl_daemon, admin, bystander):
    w = login(acl_daemon, "worker", "w-secret", protocol=3)
    with pytest.raises(redis.exceptions.NoPermissionError):
        w.execute_command("QWORK", "payroll", "w1")
    c = RespSocket(acl_daemon.port)
    try:
        c.send("AUTH", "worker", "w-secret")
        assert c.read() == b"OK"
        c.send("SUBSCRIBE", "QWORK payroll w1")          # the queue inside the channel is checked too
        assert str(c.read()) == "NOPERM User worker has no permissions to access the 'payroll' queue"
        bystander()
        c.send("AUTH", "producer", "p-secret")
        c.send("SUBSCRIBE", "QWORK emails w1")
        assert c.read() == b"OK"
        assert str(c.read()) == "NOPERM User producer has no permissions to run the 'subscribe' command"
        c.send("AUTH", "app", APP_PASSWORD)
        c.send("SUBSCRIBE", "QWORK emails w1")
        assert c.read() == b"OK" and c.read() == [b"subscribe", b"QWORK emails w1", 1]
    finally:
        c.close()
    assert qinfo(admin, "payroll")[b"in_flight"] == 0


def test_info_counts_refusals(acl_daemon, admin):
    w = login(acl_daemon, "worker", "w-secret")
    assert w.execute_command("ACL", "WHOAMI") == b"worker"   # connected (redis-py's CLIENT SETINFO is refused too)
    before = admin.info("stats")
    with pytest.raises(redis.exceptions.NoPermissionError):
        w.execute_command("QPUSH", "jobs:a", "x")
    with pytest.raises(redis.exceptions.NoPermissionError):
        w.execute_command("QCLAIM", "other", "w1")
    with pytest.raises(redis.exceptions.AuthenticationError):
        no_retry_client(acl_daemon, username="worker", password="bad").ping()
    after = admin.info("stats")
    for field in ("acl_access_denied_cmd", "acl_access_denied_key", "acl_access_denied_auth"):
        assert after[field] == before[field] + 1, field


def test_redis_cli_as_a_limited_user(acl_daemon):
    def cli(*args):
        return subprocess.run(["redis-cli", "-p", str(acl_daemon.port), "--user", "worker", "--pass", "w-secret",
                               "--no-auth-warning", *args], capture_output=True, timeout=30)
    assert cli("ACL", "WHOAMI").stdout == b"worker\n"
    refused = cli("--no-raw", "QCLAIM", "payroll", "w1")
    assert refused.stdout == b"(error) NOPERM User worker has no permissions to access the 'payroll' queue\n"


def test_config_set_requirepass_changes_the_default_users_password(tmp_path):
    with Daemon(str(tmp_path / "data"), port=free_port()) as d:
        c = d.client()
        assert c.execute_command("CONFIG", "SET", "requirepass", "new-secret") == b"OK"
        assert c.execute_command("ACL", "WHOAMI") == b"default"             # this connection stays in
        assert first_reply(d, "DBSIZE") == "NOAUTH Authentication required."
        assert d.client(password="new-secret").execute_command("DBSIZE") == 0
        with pytest.raises(redis.exceptions.AuthenticationError):
            no_retry_client(d, password="old").ping()


@pytest.mark.parametrize("line, message", [
    ("user worker on >pw +qnosuch", "Error loading ACL rule '+qnosuch' for the user named 'worker': "
                                    "Unknown command or category name in ACL"),
    ("user worker on #abc", "The password hash must be exactly 64 characters"),
    ("user worker on ~* allkeys ~jobs:*", "Adding a pattern after the * pattern"),
    ("user worker bogus", "Error loading ACL rule 'bogus' for the user named 'worker': Syntax error"),
    ("user worker on +@nosuch", "Unknown command or category name in ACL"),
    ("user worker on (~x +qpush)", "selectors are not supported by leaseq"),
    ("user app on\nuser app off", "Duplicate user 'app' found"),
])
def test_a_bad_user_line_stops_the_daemon_naming_file_line_and_rule(tmp_path, line, message):
    conf = tmp_path / "bad.conf"
    conf.write_text(f"port 0\n{line}\n")
    done = subprocess.run([*LEASEQ, "serve", "--config", str(conf), "--dir", str(tmp_path / "d")],
                          capture_output=True, timeout=60)
    assert done.returncode != 0
    err = done.stderr.decode()
    assert f"{conf}:{1 + line.count(chr(10)) + 1}:" in err and message in err


def test_keyspace_commands_check_every_queue_they_name(acl_daemon, admin, bystander):
    admin.execute_command("QPUSH", "jobs:typed", "x")
    t = login(acl_daemon, "tools", "t-secret")
    assert t.type("jobs:typed") == b"queue"
    with pytest.raises(redis.exceptions.NoPermissionError, match="'payroll' queue"):
        t.type("payroll")
    with pytest.raises(redis.exceptions.NoPermissionError, match="'payroll' queue"):
        t.exists("jobs:typed", "payroll")           # every key of EXISTS, not only the first
    bystander()
    assert b"payroll" in t.keys("*")                # names are not hidden (docs/semantics.md §7)



def test_redis_cli_over_tls_as_a_pattern_limited_user(tmp_path, pki):
    """The sidecar's locked-down shape: TLS, a user limited to jobs:*."""
    conf = tmp_path / "leaseq.conf"
    conf.write_text("requirepass admin-secret\nuser worker on >w-secret ~jobs:* +qclaim +qack +qpush\n")
    tls_port = free_port()
    d = Daemon(str(tmp_path / "data"), "--config", str(conf), env=tls_env(pki, tls_port)).start()
    try:
        def cli(*args):
            return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(tls_port), "--tls", "--cacert", pki.ca,
                                   "--cert", pki.client_cert, "--key", pki.client_key, "--user", "worker",
                                   "--pass", "w-secret", "--no-auth-warning", "--no-raw", *args],
                                  capture_output=True, timeout=30)
        assert cli("QPUSH", "jobs:mail", "hello").stdout == b"(integer) 1\n"
        refused = cli("QPUSH", "payroll", "x")
        assert refused.stdout == b"(error) NOPERM User worker has no permissions to access the 'payroll' queue\n"
        assert cli("QCLAIM", "payroll", "w1").stdout.startswith(b"(error) NOPERM")
        assert d.client(password="admin-secret").execute_command("DBSIZE") == 1      # payroll was not created
    finally:
        d.stop()
