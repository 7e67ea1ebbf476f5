"""Log dirs (KIP-113) on a real broker process with two ``log.dirs``: DescribeLogDirs from
kafka-python's ``KafkaAdminClient`` (confluent-kafka's AdminClient has no describe_log_dirs)
and from ``tidelog log-dirs describe``, a replica moved with ``tidelog log-dirs move --wait``
while a confluent-kafka producer writes with acks=all (every acknowledged record read back
at its offset, the partition's files in the new dir), and a move to an unknown dir."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.errors import LogDirNotFoundError

from tests.harness import BrokerProcess
from tests.integration.cli.conftest import Tidelog

pytestmark = pytest.mark.integration

TOPIC = "moving"
#: Prefilled before the move, copied at the quota below: about two seconds of copying.
PREFILL_RECORDS = 6000
VALUE_BYTES = 1000
QUOTA = "3000000"  # replica.alter.log.dirs.io.max.bytes.per.second


def consume_all(broker: BrokerProcess, expected: int, timeout: float = 30.0) -> dict[int, bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "log-dirs-check",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    consumer.assign([CTopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    got: dict[int, bytes] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=2000, timeout=0.5):
                assert m.error() is None, m.error()
                offset, value = m.offset(), m.value()
                assert offset is not None
                assert value is not None
                got[offset] = value
    finally:
        consumer.close()
    return got


def test_describe_move_while_producing_and_unknown_dir(
    new_broker: Callable[..., BrokerProcess], tidelog: Tidelog, tmp_path: Path
) -> None:
    a, b = (tmp_path / "dirs" / "a").resolve(), (tmp_path / "dirs" / "b").resolve()
    broker = new_broker(
        {
            "log.dirs": f"{a},{b}",
            "replica.alter.log.dirs.io.max.bytes.per.second": QUOTA,
            "log.segment.bytes": str(1 << 20),
        }
    )
    bs = ("--bootstrap-server", broker.bootstrap)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(timeout=10)

    acked: dict[int, bytes] = {}
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]

    filler = b"." * VALUE_BYTES
    for i in range(PREFILL_RECORDS):
        producer.produce(TOPIC, value=b"pre-%06d" % i + filler, on_delivery=delivered)
        if i % 1000 == 999:
            producer.poll(0)
    assert producer.flush(30) == 0

    # DescribeLogDirs from kafka-python: both dirs, the partition in one of them.
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        [answer] = kp.describe_log_dirs()
        dirs = {d["log_dir"]: d for d in answer["log_dirs"]}
        assert set(dirs) == {str(a), str(b)}
        holding = [
            path
            for path, d in dirs.items()
            for t in d["topics"]
            if t["name"] == TOPIC and t["partitions"]
        ]
        assert len(holding) == 1
        source = Path(holding[0])
        target = b if source == a else a
        [part] = next(t for t in dirs[str(source)]["topics"] if t["name"] == TOPIC)["partitions"]
        assert part["partition_size"] > PREFILL_RECORDS * VALUE_BYTES
        assert (part["offset_lag"], part["is_future_key"]) == (0, False)
        assert all(d["error_code"] == 0 and d["total_bytes"] > 0 for d in dirs.values())
        # A move to a dir the broker does not have: LOG_DIR_NOT_FOUND, from both clients.
        refused = kp.alter_replica_log_dirs({(TOPIC, 0, broker.broker_id): str(tmp_path / "x")})
        assert list(refused.values()) == [LogDirNotFoundError]
    finally:
        kp.close()
    unknown = tidelog(
        "log-dirs", "move", *bs, "--topic", TOPIC, "--partition", "0",
        "--broker", str(broker.broker_id), "--log-dir", str(tmp_path / "nowhere"),
    )  # fmt: skip
    assert unknown.returncode == 1
    assert "LOG_DIR_NOT_FOUND" in unknown.stderr

    # The move, while a producer keeps writing with acks=all.
    stop = threading.Event()

    def produce_during() -> None:
        n = 0
        while not stop.is_set():
            producer.produce(TOPIC, value=b"during-%06d" % n, on_delivery=delivered)
            producer.poll(0)
            time.sleep(0.002)
            n += 1
        producer.flush(30)

    writer = threading.Thread(target=produce_during)
    writer.start()
    try:
        moved = tidelog(
            "log-dirs", "move", *bs, "--topic", TOPIC, "--partition", "0",
            "--broker", str(broker.broker_id), "--log-dir", str(target), "--wait",
            "--timeout", "60", timeout=90,
        )  # fmt: skip
    finally:
        stop.set()
        writer.join(60)
    assert moved.returncode == 0, moved.stderr + broker.output()[-3000:]
    assert f"Moved {TOPIC}-0 on broker {broker.broker_id} to {target}." in moved.stdout
    assert "offsets behind" in moved.stderr  # --wait saw the future log catching up
    assert not errors
    during = sum(1 for v in acked.values() if v.startswith(b"during-"))
    assert during > 50, f"only {during} records were written during the move"

    # Every acknowledged record at its offset, read back from the new dir.
    got = consume_all(broker, len(acked))
    assert {o: got.get(o) for o in acked} == acked
    assert not (source / f"{TOPIC}-0").exists()
    files = {p.suffix for p in (target / f"{TOPIC}-0").iterdir()}
    assert {".log", ".index", ".timeindex"} <= files
    assert not list(target.glob("*-future"))

    described = tidelog("log-dirs", "describe", *bs, "--topic-list", TOPIC)
    assert described.returncode == 0, described.stderr
    document = json.loads(described.stdout)
    assert document["version"] == 1
    [entry] = document["brokers"]
    assert entry["broker"] == broker.broker_id
    by_dir = {d["logDir"]: d for d in entry["logDirs"]}
    assert set(by_dir) == {str(a), str(b)}
    assert by_dir[str(source)]["partitions"] == []
    [moved_part] = by_dir[str(target)]["partitions"]
    assert moved_part["partition"] == f"{TOPIC}-0"
    assert (moved_part["offsetLag"], moved_part["isFuture"]) == (0, False)
    assert moved_part["size"] > PREFILL_RECORDS * VALUE_BYTES
    assert all(d["error"] is None for d in entry["logDirs"])
