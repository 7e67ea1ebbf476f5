"""The data-loss scenario of seed 000 with ``unclean.leader.election.enable=true``: the
checker must catch it (a checker that cannot fail proves nothing).

Seed 000: with unclean leader election enabled, "选择第一个恢复的副本（不一定在 ISR 中）作为
leader", availability over consistency: a replica that missed committed records leads, and
the others truncate to it. The scenario, on one partition with RF=3 and
``min.insync.replicas=1`` (so acks=all succeeds with the leader alone):

1. produce (acked by all three);
2. SIGKILL follower F1 (the stale one); once it left the ISR produce more (acked by L, F2);
3. SIGKILL follower F2; once the ISR is {L} produce more (acked by L alone);
4. SIGKILL the leader L: the partition is offline;
5. start F1 first: it is outside the ISR, so only an unclean election makes it leader;
   produce more (acked by F1);
6. start L and F2: they truncate their logs to F1's (the records of steps 2 and 3 go).

``run_unclean`` returns the checker's findings and the values acknowledged in steps 2-3
(what must be reported lost).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from tidelog.testing.faults.checker import Findings, check_histories, check_replicas
from tidelog.testing.faults.cluster import FaultCluster
from tidelog.testing.faults.workload import Ack, final_read


@dataclass(frozen=True, slots=True)
class UncleanOutcome:
    findings: Findings
    #: Values acknowledged while the stale follower F1 was down (steps 2 and 3).
    acked_while_stale_down: frozenset[bytes]
    leader_after: int
    stale_follower: int
    divergent: list[str]


class _Phases:
    """A producer used in steps: each ``produce(n)`` returns when all n are acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.seq = 0
        self.acks: list[Ack] = []
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "max.in.flight.requests.per.connection": 1,
                "message.timeout.ms": 60000,
                "topic.metadata.refresh.interval.ms": 500,
                "log_level": 0,
            }
        )

    def produce(self, n: int) -> list[bytes]:
        errors: list[str] = []
        acked: list[bytes] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                value = bytes(msg.value())
                acked.append(value)
                self.acks.append(Ack(9, msg.partition(), msg.offset(), value, time.monotonic()))

        for _ in range(n):
            self.producer.produce(
                self.topic, b"p9-%d" % self.seq, partition=0, on_delivery=on_delivery
            )
            self.seq += 1
        remaining = self.producer.flush(90)
        if remaining or errors:
            raise RuntimeError(f"produce failed: {remaining} outstanding, errors {errors[:3]}")
        return acked


def _wait(what: str, predicate: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # retried until the deadline
            pass
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def run_unclean(
    directory: Path | None = None, log: Callable[[str], None] = print
) -> UncleanOutcome:
    from tidelog.testing.faults.run import create_topic  # noqa: PLC0415 - avoids a cycle

    work = directory or Path(tempfile.mkdtemp(prefix="tidelog-unclean-"))
    topic = "unclean"
    cluster = FaultCluster(
        work / "cluster",
        brokers=3,
        overrides={
            "zookeeper.session.timeout.ms": "6000",
            "replica.lag.time.max.ms": "2000",
            "replica.fetch.wait.max.ms": "200",
            "replica.fetch.backoff.ms": "200",
            "auto.leader.rebalance.enable": "false",
        },
    )
    try:
        cluster.start()
        create_topic(
            cluster,
            topic,
            1,
            {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"},
        )
        p0 = cluster.partitions(topic)[0]
        leader = p0.leader_id
        stale, other = [r for r in p0.replicas if r != leader]
        phases = _Phases(cluster.client_bootstrap, topic)
        phases.produce(50)
        cluster.kill_broker(stale)
        _wait(
            f"broker {stale} out of the ISR", lambda: stale not in cluster.partitions(topic)[0].isr
        )
        missed = phases.produce(50)
        cluster.kill_broker(other)
        _wait(f"ISR = [{leader}]", lambda: list(cluster.partitions(topic)[0].isr) == [leader])
        missed += phases.produce(50)
        log(f"leader {leader}; stale follower {stale} missed {len(missed)} acknowledged records")
        cluster.kill_broker(leader)
        cluster.start_broker(stale)
        _wait(
            f"broker {stale} elected (uncleanly)",
            lambda: cluster.partitions(topic)[0].leader_id == stale,
        )
        phases.produce(20)
        cluster.start_broker(leader)
        cluster.start_broker(other)
        if not cluster.wait_healthy(topic, 60.0):
            raise TimeoutError("the partition's ISR did not fill again")
        final, hws = final_read(cluster.admin_bootstrap, topic, 1)
        replicas = {0: list(cluster.partitions(topic)[0].replicas)}
        cluster.stop()
        findings = check_histories(phases.acks, [], final, hws)
        divergent = check_replicas(
            {b: cluster.log_dir(b) for b in cluster.broker_ids}, topic, hws, replicas
        )
        log(findings.summary(5))
        return UncleanOutcome(findings, frozenset(missed), stale, stale, divergent)
    finally:
        cluster.stop()
        if directory is None:
            shutil.rmtree(work, ignore_errors=True)
