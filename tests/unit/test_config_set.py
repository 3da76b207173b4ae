"""CONFIG SET's checks (``config.apply_set``), which the daemon's ``Server``
and the test core both apply: each refusal is the reply of
commands/errors.py and leaves every setting as it was."""

from __future__ import annotations

import pytest
from core import Client, Core, call

from leaseq.commands import errors
from leaseq.commands.replies import Error
from leaseq.daemon import config


def refusal(pairs) -> Error:
    with pytest.raises(Error) as caught:
        config.apply_set(config.Settings(), pairs)
    return caught.value


def same(a: Error, b: Error) -> bool:
    return (a.code, a.message) == (b.code, b.message)


def test_mutable_settings_change_and_are_named():
    before = config.Settings()
    after, changes = config.apply_set(before, [("fsync-interval", "250"), ("auto-create", "no"),
                                               ("maxmemory", "1mb")])
    assert changes == {"fsync_interval": 250, "auto_create": False, "maxmemory": 1 << 20}
    assert (after.fsync_interval, after.auto_create, after.maxmemory) == (250, False, 1 << 20)
    assert before.fsync_interval == 1000          # a new Settings: the old one is untouched


@pytest.mark.parametrize("name", ["port", "dir", "tls-port", "enable-debug-command"])
def test_a_setting_fixed_at_start_is_immutable(name):
    assert same(refusal([(name, "1")]), errors.config_immutable(name))


@pytest.mark.parametrize("name", ["save", "appendonly", "appendfsync", "databases", "maxmemory-policy"])
def test_redis_views_are_immutable(name):
    assert same(refusal([(name, "no")]), errors.config_immutable(name))


def test_an_unknown_setting_is_refused():
    assert same(refusal([("no-such-setting", "1")]), errors.config_unknown("no-such-setting"))
    assert same(refusal([("users", "x")]), errors.config_unknown("users"))   # the config file's user lines


@pytest.mark.parametrize("name, text, reason", [
    ("auto-create", "maybe", "'auto-create' must be yes or no, not 'maybe'"),
    ("fsync-interval", "soon", "'fsync-interval' must be an integer, not 'soon'"),
    ("timeout", "-1", "'timeout' is out of range: -1"),
    ("maxmemory", "lots", "'maxmemory' must be a size such as 64mb, not 'lots'"),
    ("default-durability", "sometimes", "'default-durability' must be one of fsync, async, memory, not 'sometimes'"),
    ("shutdown-on-sigterm", "now later", "'shutdown-on-sigterm' must be words of default, save, nosave, now, "
                                         "force, not 'now later'"),
    ("shutdown-on-sigint", "", "'shutdown-on-sigint' must be words of default, save, nosave, now, force, not ''"),
    ("shutdown-on-sigint", "save NOSAVE", "'shutdown-on-sigint' can't have both 'save' and 'nosave'"),
])
def test_an_invalid_value_is_refused_with_the_parsers_reason(name, text, reason):
    assert same(refusal([(name, text)]), errors.config_invalid(name, reason))


def test_all_or_none_through_the_command():
    core = Core()
    c = Client(core)
    with pytest.raises(Error) as caught:
        call(c, "CONFIG", "SET", "auto-create", "no", "fsync-interval", "x")
    assert "fsync-interval" in caught.value.message
    assert core.settings == config.Settings()                # the valid first pair was not applied either
    with pytest.raises(Error) as caught:
        call(c, "CONFIG", "SET", "max-payload", "10", "port", "1")
    assert same(caught.value, errors.config_immutable("port")) and core.settings.max_payload == 16 << 20
    assert call(c, "CONFIG", "SET", "max-payload", "10") == "OK"
    assert core.settings.max_payload == 10


def test_shutdown_on_signal_settings_take_redis_words_in_any_order_and_case():
    after, changes = config.apply_set(config.Settings(), [("shutdown-on-sigterm", "FORCE now"),
                                                          ("shutdown-on-sigint", "default nosave")])
    assert changes == {"shutdown_on_sigterm": "now force", "shutdown_on_sigint": "nosave"}
    after, _ = config.apply_set(after, [("shutdown-on-sigint", "default")])
    assert after.shutdown_on_sigint == "default"


def test_a_config_file_gives_their_words_as_redis_writes_them(tmp_path):
    """``shutdown-on-sigterm now force`` (Redis's CONFIG REWRITE writes the
    words unquoted), or quoted; what leaseq rewrites reads back the same."""
    conf = tmp_path / "leaseq.conf"
    conf.write_text('shutdown-on-sigterm nosave now force\nshutdown-on-sigint "now"\n', encoding="utf-8")
    settings = config.load(str(conf), environ={})
    assert (settings.shutdown_on_sigterm, settings.shutdown_on_sigint) == ("nosave now force", "now")
    config.rewrite(str(conf), settings, "")
    assert config.load(str(conf), environ={}) == settings
    conf.write_text("shutdown-on-sigterm now soon\n", encoding="utf-8")
    with pytest.raises(config.ConfigError, match=r":1: 'shutdown-on-sigterm' must be words of .*, not 'now soon'"):
        config.load(str(conf), environ={})
