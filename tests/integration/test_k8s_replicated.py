"""conf/k8s-replicated.yaml, the replicated Kubernetes example: its objects
fit together (names, the settings it gives leaseq, the sentinels' quorum),
and its scripts and hooks work as the pods run them, here on loopback: three
sentinels from its sentinel.conf, two leaseq nodes started by its start.py
(which asks the sentinels for its role), a SIGKILL of the primary, the
killed pod, started again the same way, coming back as the new primary's
replica with what it had acknowledged, and the preStop hook handing the
role back before a planned stop."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys

import redis
import yaml
from harness import as_map, free_port, wait_for
from leaseq.bench.failover import SERVICE, Sentinel
from leaseq.client import Queue
from leaseq.daemon import config

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "conf" / "k8s-replicated.yaml"
PASSWORD = "change-me"


def objects() -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(EXAMPLE.read_text(encoding="utf-8"))}


def container(obj: dict, name: str) -> dict:
    return next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def test_the_objects_fit_together():
    objs = objects()
    leaseq, sentinels = objs["StatefulSet", "leaseq"], objs["StatefulSet", "leaseq-sentinel"]
    data = objs["ConfigMap", "leaseq-replicated"]["data"]
    assert leaseq["spec"]["serviceName"] == "leaseq" and ("Service", "leaseq") in objs
    assert sentinels["spec"]["serviceName"] == "leaseq-sentinel" and ("Service", "leaseq-sentinel") in objs
    assert [t["metadata"]["name"] for t in leaseq["spec"]["volumeClaimTemplates"]] == ["data"]  # a PVC each
    env = {e["name"]: e for e in container(leaseq, "leaseq")["env"]}
    settings = [n for n in env if n.startswith("LEASEQ_")]
    assert settings and all(n[len("LEASEQ_"):].lower().replace("_", "-") in config.FIELDS for n in settings), settings
    for name in ("LEASEQ_REQUIREPASS", "LEASEQ_MASTERAUTH"):
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "leaseq-auth"
    # the sentinels the pods ask are the pods of the sentinel StatefulSet
    hosts = env["SENTINELS"]["value"].split(",")
    assert hosts == [f"leaseq-sentinel-{i}.leaseq-sentinel:26379" for i in range(sentinels["spec"]["replicas"])]
    monitor = re.search(r"sentinel monitor (\S+) (\S+) (\d+) (\d+)", data["sentinel.conf"])
    service, first, port, quorum = monitor.groups()
    assert service == env["SENTINEL_SERVICE"]["value"] == SERVICE
    assert first == "leaseq-0.leaseq" and port == env["LEASEQ_PORT"]["value"]
    assert int(quorum) * 2 > sentinels["spec"]["replicas"] >= 3        # a majority of three
    # every flag the container gives `leaseq serve` is one of its options
    args = container(leaseq, "leaseq")["args"]
    flags = [a for a in args if a.startswith("--")]
    assert flags and all(f[2:] in config.FIELDS or f == "--dir" for f in flags), flags


class Pod:
    """One leaseq pod: start.py from the example's ConfigMap, run as the
    pod runs it (it execs ``leaseq serve``, so its PID is the daemon's)."""

    def __init__(self, tmp_path, index: int, sentinels: list[Sentinel]) -> None:
        self.port = free_port()
        self.dir = tmp_path / f"leaseq-{index}"
        self.script = tmp_path / "start.py"
        self.script.write_text(objects()["ConfigMap", "leaseq-replicated"]["data"]["start.py"], encoding="utf-8")
        self.env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
                        SENTINELS=",".join(f"127.0.0.1:{s.port}" for s in sentinels), SENTINEL_SERVICE=SERVICE,
                        LEASEQ_REPLICA_ANNOUNCE_IP="127.0.0.1", LEASEQ_PORT=str(self.port),
                        LEASEQ_REQUIREPASS=PASSWORD, LEASEQ_MASTERAUTH=PASSWORD, LEASEQ_MIN_REPLICAS_TO_ACK="1")
        self.log = tmp_path / f"leaseq-{index}.log"
        self.proc = None

    def start(self) -> "Pod":
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, str(self.script), "--bind", "127.0.0.1", "--dir",
                                          str(self.dir)], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self._answers, timeout=30, what=f"the pod on {self.port}")
        return self

    def _answers(self) -> bool:
        try:
            return self.client().ping()
        except redis.ConnectionError:
            return False

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, password=PASSWORD, socket_timeout=10)

    def role(self) -> list:
        return self.client().execute_command("ROLE")

    def said(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def pre_stop(self) -> str:
        """Run the container's preStop hook as the kubelet would, in the
        pod's environment; what it printed (it must succeed)."""
        command = container(objects()["StatefulSet", "leaseq"], "leaseq")["lifecycle"]["preStop"]["exec"]["command"]
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (done.stdout, done.stderr)
        return done.stdout

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def test_pods_take_their_role_from_the_sentinels_and_a_killed_primary_comes_back_as_a_replica(tmp_path):
    conf = objects()["ConfigMap", "leaseq-replicated"]["data"]["sentinel.conf"]
    pods, sentinels = [], []
    try:
        first_port = free_port()
        # the example's sentinel.conf, pointed at this machine, with a shorter down-after for the test
        local = (conf.replace("leaseq-0.leaseq 6479", f"127.0.0.1 {first_port}")
                 .replace("down-after-milliseconds leaseq 5000", "down-after-milliseconds leaseq 1000")
                 .replace("failover-timeout leaseq 60000", "failover-timeout leaseq 5000")
                 + f"sentinel auth-pass leaseq {PASSWORD}\n")
        sentinels = [Sentinel(str(tmp_path / f"sentinel-{i}"), local) for i in range(3)]
        pods = [Pod(tmp_path, i, sentinels) for i in range(2)]
        pods[0].port = first_port
        pods[0].env["LEASEQ_PORT"] = str(first_port)
        pods[0].start()
        pods[1].start()
        assert pods[0].role()[0] == b"master" and "starting as the primary" in pods[0].said()
        wait_for(lambda: pods[1].role()[:3] == [b"slave", b"127.0.0.1", first_port] and pods[1].role()[3] == b"connected",
                 timeout=30, what="the second pod to follow the first")

        # the sentinels started before the first pod and may have called it down meanwhile: a client that
        # asks them finds it once they see it up (redis-py's Sentinel passes over a primary flagged down)
        wait_for(lambda: all(as_map(s.client.execute_command("SENTINEL", "MASTER", SERVICE))[b"flags"] == b"master"
                             for s in sentinels), timeout=30, what="every sentinel to see the first pod up")
        url = (f"sentinel://:{PASSWORD}@" + ",".join(f"127.0.0.1:{s.port}" for s in sentinels)
               + f"/{SERVICE}?socket_timeout=10")
        queue = Queue(url, "emails")
        ids = [queue.push(f"mail {i}") for i in range(20)]      # each answered once on both disks
        wait_for(lambda: all(pods[1].port in s.healthy_replicas() for s in sentinels), timeout=60,
                 what="every sentinel to see the replica")

        pods[0].kill()
        wait_for(lambda: sentinels[0].primary() == ("127.0.0.1", pods[1].port), timeout=60,
                 what="the sentinels to promote the second pod")
        pods[0].start()                                          # as the StatefulSet restarts it
        assert "starting as its replica" in pods[0].said().split("start.py: the primary is")[-1]
        wait_for(lambda: pods[0].role()[:3] == [b"slave", b"127.0.0.1", pods[1].port], timeout=30,
                 what="the killed pod to follow the new primary")
        assert queue.push("after the failover") > max(ids)       # answered: the replica acknowledged it
        wait_for(lambda: pods[0].client().execute_command("QLEN", "emails") == len(ids) + 1, timeout=30,
                 what="the old primary to hold every acknowledged job")

        # a planned stop: the preStop hook, as the pod runs it, does nothing on the replica, and on
        # the primary hands the role back to the first pod before the second is stopped
        assert pods[0].pre_stop().startswith("switchover: this node is a slave")
        said = pods[1].pre_stop()
        assert f"the sentinels name 127.0.0.1:{first_port} the primary" in said, said
        assert pods[1].role()[:3] == [b"slave", b"127.0.0.1", first_port]
        os.kill(pods[1].proc.pid, signal.SIGTERM)               # a replica stops at once
        assert pods[1].proc.wait(30) == 0
        pods[1].start()                                          # the updated pod, as the StatefulSet starts it
        assert "starting as its replica" in pods[1].said().split("start.py: the primary is")[-1]
        assert queue.push("after the switchover") > max(ids)     # the queue found the first pod again
        assert pods[0].client().execute_command("QLEN", "emails") == len(ids) + 2
        queue.close()
    finally:
        for pod in pods:
            pod.kill()
        for s in sentinels:
            s.stop()
