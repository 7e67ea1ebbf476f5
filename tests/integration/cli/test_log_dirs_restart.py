"""A replica move between log dirs (KIP-113) survives broker restarts, as in Kafka: a real
broker process with two ``log.dirs`` starts moving a partition (``tidelog log-dirs move``,
the copy slowed by ``replica.alter.log.dirs.io.max.bytes.per.second``), is SIGKILLed by PID
mid-copy, restarted, and shows the future log at once (DescribeLogDirs from kafka-python,
``is_future_key``) with what it had copied; then a clean restart (SIGTERM) mid-copy again;
the move resumes each time and completes: the partition is in the new dir only, and every
record acknowledged before, between and after the restarts is read back at its offset by
confluent-kafka."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from tests.harness import BrokerProcess, wait_until
from tests.integration.cli.conftest import Tidelog
from tests.integration.cli.test_log_dirs import TOPIC, consume_all

pytestmark = pytest.mark.integration

#: About 6 MB prefilled, copied at 1 MB/s: the move runs for about six seconds unless
#: interrupted, long enough to kill the broker in the middle of it twice.
PREFILL_RECORDS = 6000
VALUE_BYTES = 1000
QUOTA = "1000000"


def partition_logs(broker: BrokerProcess) -> dict[str, list[dict[str, Any]]]:
    """log dir -> DescribeLogDirs entries of ``TOPIC``-0 there (kafka-python's client)."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        [answer] = admin.describe_log_dirs()
    finally:
        admin.close()
    out: dict[str, list[dict[str, Any]]] = {}
    for d in answer["log_dirs"]:
        assert d["error_code"] == 0, d
        for t in d["topics"]:
            if t["name"] == TOPIC:
                out[d["log_dir"]] = [p for p in t["partitions"] if p["partition_index"] == 0]
    return {k: v for k, v in out.items() if v}


def future_entry(broker: BrokerProcess, target: Path) -> dict[str, Any] | None:
    """The future log's DescribeLogDirs entry in ``target``, once it holds some data."""
    entries = partition_logs(broker).get(str(target), [])
    future = [p for p in entries if p["is_future_key"]]
    return future[0] if future and future[0]["partition_size"] > 0 else None


def produce(broker: BrokerProcess, prefix: bytes, n: int, acked: dict[int, bytes]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[object] = []

    def delivered(err: object, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[msg.offset()] = msg.value()

    filler = b"." * VALUE_BYTES
    for i in range(n):
        producer.produce(TOPIC, value=prefix + b"-%06d" % i + filler, on_delivery=delivered)
        if i % 500 == 499:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors


def test_a_move_resumes_after_a_crash_and_after_a_clean_restart(
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
    produce(broker, b"pre", PREFILL_RECORDS, acked)
    [source_dir] = partition_logs(broker)
    source = Path(source_dir)
    target = b if source == a else a
    move = (
        "log-dirs", "move", *bs, "--topic", TOPIC, "--partition", "0",
        "--broker", str(broker.broker_id), "--log-dir", str(target),
    )  # fmt: skip

    started = tidelog(*move)
    assert started.returncode == 0, started.stderr
    first = wait_until(lambda: future_entry(broker, target), 30, "the future log to fill")
    assert isinstance(first, dict)
    # Mid-copy (well below the ~6 MB to copy), the broker is SIGKILLed by PID.
    assert first["partition_size"] < PREFILL_RECORDS * VALUE_BYTES // 2
    wait_until(
        lambda: (e := future_entry(broker, target)) and e["partition_size"] > 500_000,
        30,
        "the copy to pass 500 kB",
    )
    broker.kill()
    [future_dir] = target.glob(f"{TOPIC}-0.*-future")
    on_disk = sum(f.stat().st_size for f in future_dir.glob("*.log"))
    assert 500_000 < on_disk < PREFILL_RECORDS * VALUE_BYTES

    broker.start()
    # The future log is back as the partition's future replica from the start, with what
    # it had copied (not a new, empty one), and the copy goes on from there.
    resumed = future_entry(broker, target)
    assert resumed is not None, partition_logs(broker)
    assert resumed["partition_size"] > 400_000
    assert 0 < resumed["offset_lag"] < PREFILL_RECORDS
    assert list(target.glob(f"{TOPIC}-0.*-future")) == [future_dir]
    produce(broker, b"after-crash", 300, acked)
    wait_until(
        lambda: (e := future_entry(broker, target)) and e["partition_size"] > on_disk + 500_000,
        60,
        "the resumed copy to make progress",
    )
    assert "resuming its move" in broker.output()

    # A clean restart mid-copy: the move is kept, not abandoned.
    assert broker.stop() == 0
    assert list(target.glob(f"{TOPIC}-0.*-future")) == [future_dir]
    broker.start()
    assert future_entry(broker, target) is not None, partition_logs(broker)
    produce(broker, b"after-stop", 300, acked)

    # The same move asked again waits for the resumed one to finish.
    done = tidelog(*move, "--wait", "--timeout", "120", timeout=150)
    assert done.returncode == 0, done.stderr + broker.output()[-3000:]
    assert f"Moved {TOPIC}-0 on broker {broker.broker_id} to {target}." in done.stdout
    final = partition_logs(broker)
    assert list(final) == [str(target)]
    [entry] = final[str(target)]
    assert (entry["is_future_key"], entry["offset_lag"]) == (False, 0)
    assert not (source / f"{TOPIC}-0").exists()
    assert not list(target.glob("*-future"))
    assert broker.output().count("resuming its move") == 2

    got = consume_all(broker, len(acked), timeout=60)
    assert len(acked) == PREFILL_RECORDS + 600
    assert {o: got.get(o) for o in acked} == acked
    assert sorted(acked) == list(range(len(acked)))
