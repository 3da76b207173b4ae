"""Redis's keyspace commands over queue names (docs/semantics.md §2.6):
SCAN, KEYS, EXISTS, TYPE, MEMORY USAGE, OBJECT FREQ, INFO's keyspace and
memory fields, and the CONFIG GET answers tools ask for.  Each test uses a
daemon of its own, so the key counts are exact."""

from __future__ import annotations

import pytest
import redis

from harness import as_map, error_text, job_bytes


@pytest.fixture
def r(own):
    c = own().client(decode_responses=True)
    yield c
    c.close()


def scan_all(r, **kw) -> list[str]:
    names, cursor, calls = [], 0, 0
    while True:
        cursor, page = r.scan(cursor, **kw)
        names += page
        calls += 1
        assert calls < 10_000
        if cursor == 0:
            return names


def test_scan_returns_every_queue_once_in_pages(r):
    for i in range(25):
        r.execute_command("QCREATE", f"q:{i:02}")
    cursor, page = r.scan(0, count=10)
    assert len(page) == 10 and cursor != 0
    assert sorted(scan_all(r, count=7)) == sorted(f"q:{i:02}" for i in range(25))
    assert sorted(scan_all(r, match="q:1*")) == [f"q:{i}" for i in range(10, 20)]
    assert sorted(scan_all(r, _type="queue", count=100)) == sorted(f"q:{i:02}" for i in range(25))
    assert scan_all(r, _type="string") == []


def test_scan_while_queues_come_and_go(r):
    for i in range(20):
        r.execute_command("QCREATE", f"keep:{i}")
    r.execute_command("QCREATE", "doomed")
    seen, cursor = [], 0
    cursor, page = r.scan(cursor, count=5)
    seen += page
    r.execute_command("QDROP", "doomed")
    for i in range(5):
        r.execute_command("QCREATE", f"new:{i}")
    while cursor:
        cursor, page = r.scan(cursor, count=5)
        seen += page
    kept = [n for n in seen if n.startswith("keep:")]
    assert sorted(kept) == sorted(f"keep:{i}" for i in range(20))        # every one, once
    assert len(seen) == len(set(seen))                                    # no name twice


def test_scan_errors(r):
    assert error_text(r, "SCAN", "abc") == "invalid cursor"
    assert error_text(r, "SCAN", "-1") == "invalid cursor"
    assert error_text(r, "SCAN", "0", "COUNT", "0").startswith("COUNT")
    assert error_text(r, "SCAN", "0", "BOGUS", "1") == "syntax error"


def test_type_exists_keys(r):
    r.execute_command("QPUSH", "jobs:a", "x")
    r.execute_command("QCREATE", "jobs:b")
    assert r.type("jobs:a") == "queue" and r.type("nothing") == "none"
    assert r.exists("jobs:a", "jobs:b", "nothing", "jobs:a") == 3
    assert sorted(r.keys("jobs:*")) == ["jobs:a", "jobs:b"]
    assert r.keys("x[^a]*") == []


def test_memory_usage_follows_the_payloads(r):
    """Each job counts its payload and what a job costs beyond it, as
    `leaseq bench storage` measures it in the flavour that runs."""
    beyond = job_bytes(r)
    r.execute_command("QCREATE", "m")
    empty = r.memory_usage("m")
    r.execute_command("QPUSHMANY", "m", 10, *(["p" * 1000] * 10))
    assert r.memory_usage("m") - empty == 10 * 1000 + 10 * beyond
    assert r.memory_usage("nothing") is None
    assert r.execute_command("MEMORY", "USAGE", "m", "SAMPLES", "5") == r.memory_usage("m")
    assert error_text(r, "MEMORY", "DOCTOR").startswith("unknown subcommand 'DOCTOR'")


def test_object_freq_ranks_busy_queues(r):
    r.execute_command("QPUSHMANY", "busy", 100, *(["x"] * 100))
    r.execute_command("QPUSH", "quiet", "x")
    assert r.object("freq", "busy") == 7 and r.object("freq", "quiet") == 1
    assert r.object("freq", "nothing") is None


def test_info_keyspace_and_used_memory(r):
    assert "db0" not in r.info("keyspace")
    r.execute_command("QCREATE", "a")
    r.execute_command("QCREATE", "b")
    assert r.info("keyspace")["db0"] == {"keys": 2, "expires": 0, "avg_ttl": 0}
    memory = r.info("memory")
    assert memory["used_memory"] > 1 << 20 and memory["used_memory_human"].endswith("M")


def test_config_get_answers_what_redis_tools_ask(r):
    assert r.config_get("save") == {"save": ""}
    assert r.config_get("appendonly") == {"appendonly": "yes"}
    assert r.config_get("appendfsync") == {"appendfsync": "always"}
    assert r.config_get("databases") == {"databases": "1"}
    assert r.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    r.config_set("default-durability", "async")
    assert r.config_get("appendfsync") == {"appendfsync": "everysec"}
    with pytest.raises(redis.ResponseError, match="can't set immutable config"):
        r.config_set("appendonly", "no")
    assert r.config_get("appendonly") == {"appendonly": "yes"}
