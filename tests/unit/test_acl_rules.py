"""ACL rules and Redis globs without a daemon (commands/acl.py,
commands/glob.py); tests/integration/test_acl.py drives them over sockets."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from core import Client, Core, call
from leaseq.commands.acl import Acl, AclError, User, Units
from leaseq.commands.glob import matches
from leaseq.commands.table import TABLE
from leaseq.daemon import config
from leaseq.commands.errors import NOAUTH
from leaseq.commands.replies import Error

UNITS = Units(TABLE)


def user(*rules: str) -> User:
    u = User("u", UNITS)
    for rule in rules:
        u.apply(rule)
    return u


@pytest.mark.parametrize("pattern, name, expected", [
    (b"jobs:*", b"jobs:mail", True),
    (b"jobs:*", b"job:mail", False),
    (b"*", b"", True),
    (b"h?llo", b"hello", True),
    (b"h?llo", b"hllo", False),
    (b"h[ae]llo", b"hallo", True),
    (b"h[ae]llo", b"hillo", False),
    (b"h[^e]llo", b"hallo", True),
    (b"h[^e]llo", b"hello", False),
    (b"h[a-c]llo", b"hbllo", True),
    (b"h[c-a]llo", b"hbllo", True),          # Redis accepts a reversed range
    (b"a\\*b", b"a*b", True),
    (b"a\\*b", b"axb", False),
    (b"[!a]", b"!", True),                   # '!' is no negation in Redis globs
    (b"a.b", b"axb", False),                 # regular-expression characters are literal
    (b"q(1)+", b"q(1)+", True),
    (b"line*", b"line\nbreak", True),
])
def test_redis_glob(pattern, name, expected):
    assert matches(pattern, name) is expected


def test_passwords_are_kept_as_sha256_and_removed_by_value_or_hash():
    u = user("on", ">one", "#" + hashlib.sha256(b"two").hexdigest())
    assert u.hashes == [hashlib.sha256(b"one").hexdigest(), hashlib.sha256(b"two").hexdigest()]
    assert u.password_ok(b"one") and u.password_ok(b"two") and not u.password_ok(b"three")
    u.apply("<one")
    u.apply("!" + hashlib.sha256(b"two").hexdigest())
    assert u.hashes == [] and not u.password_ok(b"one")
    with pytest.raises(AclError, match="does not exist"):
        u.apply("<never-set")


def test_nopass_and_passwords_replace_each_other():
    u = user("nopass")
    assert u.password_ok(b"anything")
    u.apply(">pw")
    assert not u.nopass and not u.password_ok(b"anything") and u.password_ok(b"pw")
    u.apply("resetpass")
    assert not u.password_ok(b"pw") and not u.nopass


def test_command_rules_apply_left_to_right_and_subcommands_follow_categories():
    u = user("+@all", "-@admin", "+client|list")
    assert u.may_run("qpush") and u.may_run("client|id") and u.may_run("client|list")
    assert not u.may_run("client|kill") and not u.may_run("config|get") and not u.may_run("shutdown")
    u.apply("-client")
    assert not any(u.may_run(x) for x in UNITS.of_command["client"])
    u.apply("nocommands")
    assert not u.allowed
    u.apply("allcommands")
    assert u.allowed == UNITS.all


def test_categories_reach_the_commands_whose_flags_say_so():
    write = UNITS.in_category("write")
    assert {"qpush", "qack", "qclaim", "qdrop"} <= write and "qlen" not in write
    assert UNITS.in_category("read") >= {"qlen", "qinfo", "qget", "qpeek", "qscan"}
    assert "qclaim" in UNITS.in_category("blocking")
    assert UNITS.in_category("admin") >= {"config|set", "client|kill", "debug|clock", "shutdown", "bgsave"}
    assert "acl|whoami" not in UNITS.in_category("admin")
    with pytest.raises(AclError, match="Unknown command or category"):
        UNITS.in_category("nosuch")


def test_queue_patterns_and_the_fast_path():
    assert user("~*", "+@all").unrestricted
    assert not user("~jobs:*", "+@all").unrestricted
    assert not user("~*", "+@all", "-debug").unrestricted
    u = user("%R~*", "%W~mine:*")
    assert u.queue_access(b"theirs") == (True, False)
    assert u.queue_access(b"mine:1") == (True, True)
    u.apply("resetkeys")
    assert u.queue_access(b"mine:1") == (False, False)    # the cache follows the rules
    u.apply("allkeys")
    assert u.queue_access(b"x") == (True, True)


def test_reset_makes_a_new_user():
    u = user("on", ">pw", "~*", "+@all", "reset")
    assert (u.enabled, u.hashes, u.patterns, u.allowed) == (False, [], [], set())
    assert u.describe() == "user u off resetchannels -@all"


def test_bad_rules_change_nothing():
    u = user("on", "~q", "+qpush")
    before = u.describe()
    for bad in ("+nosuch", "%X~q", "#tooshort", "bogus", "+client|nosuch", "(~x)"):
        with pytest.raises(AclError):
            u.apply(bad)
    assert u.describe() == before


def test_requirepass_is_the_default_users_password_even_over_a_declared_default():
    acl = Acl(TABLE, [("default", "on", "nopass", "~*", "+@all")], requirepass="s3")
    assert acl.auth_required and acl.authenticate(b"default", b"s3") is acl.default
    assert acl.authenticate(b"default", b"other") is None
    assert not Acl(TABLE).auth_required


def test_the_core_refuses_before_authentication_and_logs_in_users():
    core = Core(requirepass="pw", users=(("w", "on", ">wp", "~a*", "+qpush"),))
    c = Client(core)
    with pytest.raises(Error) as e:
        call(c, "QPUSH", "a1", "x")
    assert e.value == NOAUTH
    assert call(c, "AUTH", "w", "wp") == "OK"
    assert call(c, "QPUSH", "a1", "x") == 1
    for args, refusal in [(("QPUSH", "b1", "x"), "NOPERM User w has no permissions to access the 'b1' queue"),
                          (("QLEN", "a1"), "NOPERM User w has no permissions to run the 'qlen' command")]:
        with pytest.raises(Error) as e:
            call(c, *args)
        assert str(e.value) == refusal


def test_the_example_user_lines_of_conf_leaseq_conf_load(tmp_path):
    """conf/leaseq.conf shows user lines commented out; uncommented they load."""
    here = Path(__file__).resolve().parents[2]
    lines = [ln[2:] for ln in (here / "conf" / "leaseq.conf").read_text().splitlines() if ln.startswith("# user ")]
    assert len(lines) == 3
    conf = tmp_path / "users.conf"
    conf.write_text("\n".join(lines) + "\n")
    users = config.read_file(str(conf))["users"]
    acl = Acl(TABLE, users)
    assert acl.authenticate(b"producer", b"password") is acl.users["producer"]
    assert acl.users["worker"].may_run("qclaim") and not acl.users["worker"].may_run("qpush")
