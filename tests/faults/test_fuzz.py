"""Protocol fuzzing against a live three-broker cluster (issue 7) while a real acks=all
producer and a consumer work: valid Produce, Fetch and Metadata requests with wrong field
values (and some byte-level mutations of them), for a bounded time. No broker may crash or
hang (every request is answered, or its connection closed, in time), the real clients keep
working, and nothing they had acknowledged is lost.

Extends tests/integration/test_bad_input.py (one broker, byte mutations only) with
field-level wrong values and a replicated topic. Fetches claiming to come from a replica
use ids that are not brokers: a client impersonating a real follower is outside Kafka's
failure model (seed 000: no Byzantine faults; Kafka guards it with the CLUSTER_ACTION ACL).
"""

from __future__ import annotations

import random
import socket
import struct
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.integration.rawclient import FETCH_V, METADATA_V, PRODUCE_V, Raw, batch
from tidelog.protocol.apis import ApiKey
from tidelog.testing.faults.checker import check_histories
from tidelog.testing.faults.cluster import FaultCluster
from tidelog.testing.faults.run import create_topic
from tidelog.testing.faults.workload import ConsumerWorker, ProducerWorker, final_read

pytestmark = pytest.mark.integration

TOPIC = "fuzz"
FUZZ_SECONDS = 9.0
SEED = 20261122


def _bad_batch(rng: random.Random) -> bytes:
    good = bytearray(batch(b"fuzz", b"fuzz"))
    kind = rng.randrange(6)
    if kind == 0:
        good[17 + rng.randrange(4)] ^= 0xFF  # CRC
    elif kind == 1:
        good[16] = rng.choice([0, 1, 3, 255])  # magic
    elif kind == 2:
        struct.pack_into(">q", good, 0, rng.choice([-1, 12345, 2**62]))  # base offset
    elif kind == 3:
        struct.pack_into(">i", good, 8, rng.choice([-1, 0, 5, 1 << 30]))  # batch length
    elif kind == 4:
        return bytes(good[: rng.randrange(1, len(good))])  # truncated
    else:
        struct.pack_into(">i", good, 57, rng.choice([-1, 0, 1 << 20]))  # record count
    return bytes(good)


def _produce(rng: random.Random, partitions: int) -> dict[str, Any]:
    records: bytes | None = rng.choice(
        [batch(b"fuzz"), _bad_batch(rng), _bad_batch(rng), b"", None]
    )
    return {
        "transactional_id": rng.choice([None, None, "", "fuzz-tx"]),
        "acks": rng.choice([-1, 0, 1, 2, -2, 3, 32767, -32768]),
        "timeout": rng.choice([-1, 0, 1, 500, 2**31 - 1]),
        "topic_data": [
            {
                "name": rng.choice([TOPIC, TOPIC, "", "nope", "x" * 300, "bad/name"]),
                "partition_data": [
                    {
                        "index": rng.choice([*range(partitions), -1, partitions, 2**31 - 1]),
                        "records": records,
                    }
                ],
            }
        ],
    }


def _fetch(rng: random.Random, partitions: int) -> dict[str, Any]:
    return {
        # Never a real broker id (1..3): see the module docstring.
        "replica_id": rng.choice([-1, -1, -2, 0, 99, 2**31 - 1]),
        "max_wait": rng.choice([0, 100, 500, -1]),
        "min_bytes": rng.choice([-1, 0, 1, 1 << 30]),
        "max_bytes": rng.choice([-1, 0, 1, 1 << 20]),
        "isolation_level": rng.choice([0, 1, 7, -1]),
        "session_id": rng.choice([0, 0, 7, -1]),
        "session_epoch": rng.choice([-1, -1, 0, 5]),
        "topics": [
            {
                "topic": rng.choice([TOPIC, TOPIC, "", "nope"]),
                "partitions": [
                    {
                        "partition": rng.choice([*range(partitions), -1, 2**31 - 1]),
                        "current_leader_epoch": rng.choice([-1, 0, 99999]),
                        "fetch_offset": rng.choice([0, 1, -5, 2**62, 10**6]),
                        "log_start_offset": rng.choice([-1, 0, 2**62]),
                        "partition_max_bytes": rng.choice([-1, 0, 1, 1 << 20]),
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": rng.choice(["", "r" * 100]),
    }


def _metadata(rng: random.Random) -> dict[str, Any]:
    names = rng.choice([[TOPIC], [], ["nope"], ["", "bad/name"], ["fuzz-" + "y" * 250]])
    return {
        "topics": [{"name": n, "topic_id": None} for n in names],
        "allow_auto_topic_creation": rng.choice([True, False]),
        "include_topic_authorized_operations": rng.choice([True, False]),
    }


def _send(port: int, frame: bytes, wait_s: float) -> str:
    """'answered', 'closed' or 'hung' (neither within ``wait_s``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(frame)
        s.settimeout(wait_s)
        try:
            data = s.recv(1 << 16)
        except TimeoutError:
            return "hung"
        except ConnectionResetError:
            return "closed"
        return "answered" if data else "closed"


def test_fuzzed_requests_against_a_cluster_crash_nothing_and_lose_nothing(
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    cluster = FaultCluster(
        tmp_path / "cluster",
        overrides={
            "zookeeper.session.timeout.ms": "6000",
            "replica.lag.time.max.ms": "2000",
            "replica.fetch.wait.max.ms": "200",
            "auto.leader.rebalance.enable": "false",
            "min.insync.replicas": "2",
        },
    )
    producer: ProducerWorker | None = None
    consumer: ConsumerWorker | None = None
    try:
        cluster.start()
        create_topic(cluster, TOPIC, 3, {"min.insync.replicas": "2"})
        producer = ProducerWorker(cluster.client_bootstrap, TOPIC, 3, 0, interval_s=0.01).start()
        consumer = ConsumerWorker(cluster.client_bootstrap, TOPIC, 3, "c0").start()
        ports = [cluster.broker(b).port for b in cluster.broker_ids]
        encoder = Raw(SimpleNamespace(host="127.0.0.1", port=ports[0]))  # type: ignore[arg-type]
        outcomes: dict[str, int] = {"answered": 0, "closed": 0}
        hung: list[str] = []
        deadline = time.monotonic() + FUZZ_SECONDS
        while time.monotonic() < deadline:
            api, version, data = rng.choice(
                [
                    (ApiKey.PRODUCE, PRODUCE_V, _produce(rng, 3)),
                    (ApiKey.FETCH, FETCH_V, _fetch(rng, 3)),
                    (ApiKey.METADATA, METADATA_V, _metadata(rng)),
                ]
            )
            try:
                _cid, frame = encoder.encode(api, version, data)
            except Exception:  # a value the encoder cannot even represent: skip it
                continue
            if rng.random() < 0.2:  # and some byte-level mutations of those
                mutated = bytearray(frame)
                for _ in range(rng.randint(1, 3)):
                    mutated[rng.randrange(4, len(mutated))] = rng.randrange(256)
                frame = bytes(mutated)
            acks_zero = api == ApiKey.PRODUCE and data["acks"] == 0
            wait_s = 0.3 if acks_zero else 12.0  # acks=0 gets no answer by design
            outcome = _send(rng.choice(ports), frame, wait_s)
            if outcome == "hung" and not acks_zero:
                hung.append(f"{api.name} v{version} {data}")
            elif outcome != "hung":
                outcomes[outcome] += 1
        encoder.close()
        assert not hung, hung[:3]
        assert outcomes["answered"] > 20, outcomes
        for b in cluster.broker_ids:
            assert cluster.broker_state(b) == "running", f"broker {b} died"
        assert cluster.wait_healthy(TOPIC, 30.0)
        # The real clients kept working through it and afterwards.
        acked = producer.acked_count()
        deadline = time.monotonic() + 30
        while producer.acked_count() < acked + 50 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert producer.acked_count() >= acked + 50
        producer.stop()
        consumer.stop()
        final, hws = final_read(cluster.admin_bootstrap, TOPIC, 3)
        findings = check_histories(producer.history.acks, consumer.reads, final, hws)
        assert findings.lost_count == 0
        assert findings.failures == {}, findings.summary()
    finally:
        if producer is not None:
            producer.stop(flush_timeout_s=5.0)
        if consumer is not None:
            consumer.stop()
        cluster.stop()
