"""The command table, the docs and the config file agree with each other."""

import pathlib
import re
import shlex

import hiredis
import pytest

from leaseq.commands import errors
from leaseq.commands.replies import Map
from leaseq.commands.table import TABLE, command_docs, command_info, render_markdown
from leaseq.daemon import config
from leaseq.daemon.resp import encode

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_commands_doc_is_generated_from_the_table():
    committed = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    assert committed == render_markdown(), "docs/commands.md is stale: run `leaseq docs`"


def test_every_command_has_a_section_in_the_doc():
    doc = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    for name in TABLE:
        assert f"### {name.decode().upper()}\n" in doc


@pytest.mark.parametrize("name", sorted(TABLE))
def test_table_entry_is_complete(name):
    c = TABLE[name]
    assert c.arity != 0
    assert c.summary and c.group
    assert callable(c.handler) or "transaction" in c.flags
    assert c.flags <= {"write", "readonly", "denyoom", "blocking", "fast", "admin", "noauth", "loading",
                       "no-multi", "transaction", "direct", "pubsub"}
    assert not ({"write", "readonly"} <= c.flags)


def decoded(data: bytes):
    """The one reply in ``data`` as hiredis's reader (a real client's) parses it."""
    reader = hiredis.Reader()
    reader.feed(data)
    reply = reader.gets()
    assert reply is not False, f"incomplete reply: {data!r}"
    assert reader.gets() is False, f"bytes after the reply: {data!r}"
    return reply


def as_read(value, resp3: bool):
    """What a client reads for a reply value: a Map is a dict in RESP3 and a
    flat [k1, v1, ...] array in RESP2; simple and bulk strings are bytes."""
    if isinstance(value, Map):
        if resp3:
            return {as_read(k, resp3): as_read(v, resp3) for k, v in value.items}
        return [as_read(x, resp3) for kv in value.items for x in kv]
    if isinstance(value, (list, tuple)):
        return [as_read(v, resp3) for v in value]
    if isinstance(value, str):
        return value.encode()
    return value


@pytest.mark.parametrize("resp3", [False, True])
def test_command_info_and_docs_encode(resp3):
    for c in TABLE.values():
        info = command_info(c)
        assert info[0] == c.name.encode() and info[1] == c.arity and len(info) == 10
        got = decoded(encode(info, resp3))
        assert got == as_read(info, resp3)
        assert got[:3] == [c.name.encode(), c.arity, sorted(f.encode() for f in c.flags)]
        assert encode(command_docs(c), resp3).startswith(b"%" if resp3 else b"*")
        docs = decoded(encode(command_docs(c), resp3))
        assert docs == as_read(command_docs(c), resp3)
        fields = docs if resp3 else dict(zip(docs[::2], docs[1::2]))
        assert fields[b"summary"] == c.summary.encode() and fields[b"group"] == c.group.encode()


def test_qpush_syntax_reads_like_the_spec():
    assert TABLE[b"qpush"].syntax() == ("QPUSH queue payload [PRIORITY p] [DELAY ms | AT ms-epoch] "
                                        "[KEY key [WHILE queued | active | exists] [REPLACE]] [MAXDELIVERIES n] [EXPIRE ms] "
                                        "[AFTER count queue id [queue id ...]] [ONFAIL run | fail] [GROUP group] "
                                        "[META field value [field value ...]]")
    assert TABLE[b"qpushmany"].syntax().startswith("QPUSHMANY queue count payload [payload ...] ")
    assert "[KEYS key [key ...] [WHILE queued | active | exists] [REPLACE]]" in TABLE[b"qpushmany"].syntax()
    assert TABLE[b"qpushmany"].syntax().endswith("[GROUP group | GROUPS group [group ...]] "
                                                 "[META field value [field value ...]]")
    assert TABLE[b"qclaim"].syntax() == "QCLAIM queue consumer [COUNT n] [LEASE ms] [BLOCK ms] [SESSION] [COMPACT]"
    assert TABLE[b"qnack"].syntax() == "QNACK queue token [token ...] [DELAY ms] [ERROR message] [DEAD]"


def test_every_error_code_is_documented():
    doc = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    for code in errors.CODES:
        assert f"`{code}`" in doc, f"docs/errors.md does not describe {code}"


def test_config_file_documents_every_setting():
    text = (ROOT / "conf" / "leaseq.conf").read_text(encoding="utf-8")
    for name in config.FIELDS:
        assert re.search(rf"^(# )?{re.escape(name)} ", text, re.M), f"conf/leaseq.conf lacks {name}"


def shipped_setting_lines() -> list[tuple[int, str, str]]:
    """The commented-out ``# name value`` lines of conf/leaseq.conf that name a
    setting (prose lines do not: they have more words, or no setting's name
    first): (line number, name, value text as the file's parser reads it)."""
    lines = (ROOT / "conf" / "leaseq.conf").read_text(encoding="utf-8").splitlines()
    out = []
    for number, line in enumerate(lines, 1):
        if not line.startswith("# "):
            continue
        try:
            words = shlex.split(line[2:])
        except ValueError:
            continue                                    # prose with an apostrophe
        if len(words) == 2 and words[0] in config.FIELDS:
            out.append((number, words[0], words[1]))
    return out


def test_config_file_shows_every_setting_once_at_its_default():
    defaults = config.Settings()
    shown = shipped_setting_lines()
    assert sorted(name for _, name, _ in shown) == sorted(config.FIELDS), \
        "conf/leaseq.conf must show each setting exactly once as a '# name value' line"
    for number, name, text in shown:
        assert config.parse_value(name, text) == getattr(defaults, config.attr_name(name)), \
            f"conf/leaseq.conf:{number}: {name} {text!r} is not the default"


def test_config_file_uncommented_loads_to_the_defaults(tmp_path):
    """The shipped file changes nothing, and neither does uncommenting every
    setting line in it (read by the daemon's own parser, quotes and units)."""
    assert config.load(str(ROOT / "conf" / "leaseq.conf"), environ={}) == config.Settings()
    lines = (ROOT / "conf" / "leaseq.conf").read_text(encoding="utf-8").splitlines()
    for number, _name, _text in shipped_setting_lines():
        lines[number - 1] = lines[number - 1][2:]
    uncommented = tmp_path / "leaseq.conf"
    uncommented.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert config.load(str(uncommented), environ={}) == config.Settings()


def test_config_errors_name_file_line_and_setting(tmp_path):
    bad = tmp_path / "bad.conf"
    bad.write_text("port 6479\nfsync-interval soon\n")
    with pytest.raises(config.ConfigError, match=r"bad.conf:2: 'fsync-interval' must be an integer"):
        config.load(str(bad), environ={})
    bad.write_text("no-such-setting 1\n")
    with pytest.raises(config.ConfigError, match=r"bad.conf:1: unknown setting 'no-such-setting'"):
        config.load(str(bad), environ={})


def test_config_precedence_is_file_then_env_then_flags(tmp_path):
    f = tmp_path / "l.conf"
    f.write_text("port 7000\nmax-payload 1mb\nauto-create no\n")
    s = config.load(str(f), {"port": 7002}, environ={"LEASEQ_PORT": "7001", "LEASEQ_MAX_PAYLOAD": "2kb"})
    assert (s.port, s.max_payload, s.auto_create) == (7002, 2048, False)
    with pytest.raises(config.ConfigError, match="LEASEQ_DEFAULT_DURABILITY"):
        config.load(None, environ={"LEASEQ_DEFAULT_DURABILITY": "sometimes"})


def test_docs_and_info_flags_are_status_replies_as_redis_cli_requires():
    # redis-cli asserts REDIS_REPLY_STATUS for argument flags (it aborted on bulk strings)
    docs = encode(command_docs(TABLE[b"qpush"]), False)
    assert b"+optional\r\n" in docs and b"$8\r\noptional" not in docs
    assert b"+write\r\n" in encode(command_info(TABLE[b"qpush"]), False)
