"""``tidelog produce`` / ``tidelog consume`` with kafka-console-producer/consumer options,
as subprocesses against one real broker: keys, headers and every compression codec (read
back by librdkafka too), the DefaultMessageFormatter's print.* columns, consumer groups
(commit and continue; two members splitting a topic), and read_committed against
librdkafka's transactional producer."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from tests.harness import BrokerProcess, wait_until
from tests.integration.cli.conftest import Result, Tidelog
from tidelog.client import BlockingClient, FetchRequestPartition
from tidelog.model import TopicPartition
from tidelog.protocol.records import Compression, iter_batches

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker whose groups start at once and whose internal topics are small."""
    overrides = {
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "3",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.num.partitions": "3",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
    }
    process = BrokerProcess(tmp_path_factory.mktemp("records-cli"), overrides).start()
    try:
        yield process
    finally:
        process.stop()


def _ok(result: Result) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def _create(tidelog: Tidelog, broker: BrokerProcess, topic: str, partitions: int = 1) -> None:
    _ok(
        tidelog(
            "topics", "create", "--bootstrap-server", broker.bootstrap,
            "--topic", topic, "--partitions", str(partitions),
        )
    )  # fmt: skip


def _produce(broker: BrokerProcess, topic: str, records: list[tuple[str, str]]) -> None:
    """(key, value) records through librdkafka (in-process: quicker than a ``produce``)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1})
    for key, value in records:
        producer.produce(topic, value.encode(), key.encode())
    assert producer.flush(30) == 0


def test_keys_headers_codecs_and_the_formatter_columns(
    broker: BrokerProcess, tidelog: Tidelog
) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    _create(tidelog, broker, "rec-fmt")
    reader = (
        "--property", "parse.key=true", "--property", "key.separator=:",
        "--property", "parse.headers=true", "--property", "headers.delimiter=|",
    )  # fmt: skip
    # A bare --compression-codec is gzip, as in Kafka.
    codecs = {"gzip": (), "snappy": ("snappy",), "lz4": ("lz4",)}
    for i, (codec, value) in enumerate(codecs.items()):
        produced = tidelog(
            "produce", *bs, "--topic", "rec-fmt", *reader, "--compression-codec", *value,
            "--request-required-acks", "1", input=f"codec:{codec},n:{i}|key-{i}:value {i}\n",
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr
        assert "produced 1 records to rec-fmt (acks=1)" in produced.stderr

    # Each batch carries the codec it was asked for.
    with BlockingClient(broker.bootstrap) as client:
        fetched = client.fetch({TopicPartition("rec-fmt", 0): FetchRequestPartition(0)})
    raw = fetched[TopicPartition("rec-fmt", 0)].records
    assert [h.compression for _, h in iter_batches(raw)] == [
        Compression.GZIP, Compression.SNAPPY, Compression.LZ4
    ]  # fmt: skip

    consumed = tidelog(
        "consume", *bs, "--topic", "rec-fmt", "--from-beginning", "--max-messages", "3",
        "--property", "print.timestamp=true", "--property", "print.partition=true",
        "--property", "print.offset=true", "--property", "print.headers=true",
        "--property", "print.key=true",
    )  # fmt: skip
    lines = _ok(consumed).splitlines()
    assert [re.sub(r"^CreateTime:\d{13}\t", "", line) for line in lines] == [
        f"Partition:0\tOffset:{i}\tcodec:{codec},n:{i}\tkey-{i}\tvalue {i}"
        for i, codec in enumerate(codecs)
    ]
    assert consumed.stderr.endswith("consumed 3 records from rec-fmt\n")

    # librdkafka decompresses what tidelog compressed, keys and headers intact.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rec-fmt-librdkafka"})
    consumer.assign([CTopicPartition("rec-fmt", 0, 0)])
    got: list[Any] = []
    try:

        def all_read() -> bool:
            got.extend(consumer.consume(3, 0.5))
            return len(got) >= 3

        wait_until(all_read, 30, "3 records")
    finally:
        consumer.close()
    assert [(m.key(), m.value(), m.headers()) for m in got] == [
        (f"key-{i}".encode(), f"value {i}".encode(), [("codec", codec.encode()), ("n", b"%d" % i)])
        for i, codec in enumerate(codecs)
    ]


def test_a_group_commits_where_it_stopped_and_the_next_run_continues(
    broker: BrokerProcess, tidelog: Tidelog
) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    _create(tidelog, broker, "rec-group", partitions=2)
    lines = [f"k{i}:v{i}" for i in range(10)]
    _produce(broker, "rec-group", [(f"k{i}", f"v{i}") for i in range(10)])
    group = ("--group", "rec-g1", "--property", "print.key=true", "--property", "key.separator=:")

    first = tidelog(
        "consume", *bs, "--topic", "rec-group", *group, "--from-beginning", "--max-messages", "4"
    )
    first_lines = _ok(first).splitlines()
    assert len(first_lines) == 4

    described = json.loads(_ok(tidelog("groups", "describe", *bs, "--group", "rec-g1", "--json")))[
        0
    ]
    assert described["state"] == "Empty"  # it left
    committed = {p["partition"]: p["current_offset"] for p in described["partitions"]}
    assert sum(committed.values()) == 4

    second = tidelog("consume", *bs, "--topic", "rec-group", *group, "--timeout-ms", "1000")
    second_lines = _ok(second).splitlines()
    assert sorted(first_lines + second_lines) == sorted(lines)
    assert "consumed 6 records from rec-group" in second.stderr


def _spawn(args: list[str], out: Path) -> subprocess.Popen[bytes]:
    with out.open("wb") as stdout:
        return subprocess.Popen(
            [sys.executable, "-m", "tidelog", *args], stdout=stdout, stderr=subprocess.PIPE
        )


def test_two_members_split_the_partitions_commit_and_leave_on_sigterm(
    broker: BrokerProcess, tidelog: Tidelog, tmp_path: Path
) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    _create(tidelog, broker, "rec-split", partitions=2)
    member = [
        "consume", *bs, "--topic", "rec-split", "--group", "rec-g2",
        "--consumer-property", "heartbeat.interval.ms=300",
        "--consumer-property", "auto.commit.interval.ms=300",
        "--property", "print.partition=true",
    ]  # fmt: skip
    outs = [tmp_path / "m0.out", tmp_path / "m1.out"]
    procs = [_spawn(member, outs[0]), _spawn(member, outs[1])]
    try:

        def split() -> list[Any] | None:
            got = json.loads(
                _ok(tidelog("groups", "describe", *bs, "--group", "rec-g2", "--json"))
            )[0]
            ok = got["state"] == "Stable" and len(got["members"]) == 2
            if ok and all(len(m["assignment"]) == 1 for m in got["members"]):
                return list(got["members"])
            return None

        members = wait_until(split, 30, "two members with a partition each", interval=0.3)
        assert isinstance(members, list)
        assert sorted(m["assignment"][0]["partition"] for m in members) == [0, 1]

        records = [f"k{i}:v{i}" for i in range(20)]
        _produce(broker, "rec-split", [(f"k{i}", f"v{i}") for i in range(20)])

        def printed() -> list[list[str]] | None:
            texts = [o.read_text().splitlines() for o in outs]
            return texts if sum(map(len, texts)) >= len(records) else None

        texts = wait_until(printed, 30, "every record printed by one member")
        assert isinstance(texts, list)

        def committed_while_running() -> bool:
            got = json.loads(
                _ok(tidelog("groups", "describe", *bs, "--group", "rec-g2", "--json"))
            )[0]
            offsets = [p["current_offset"] or 0 for p in got["partitions"]]
            return got["state"] == "Stable" and sum(offsets) == len(records)

        wait_until(committed_while_running, 30, "periodic commits of every record", interval=0.3)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        stderrs = [proc.communicate(timeout=30)[1].decode() for proc in procs]
        statuses = [proc.returncode for proc in procs]
    assert statuses == [130, 130], stderrs
    # Each member printed one partition's records; together, each record once.
    partitions = [{line.split("\t")[0] for line in text} for text in texts]
    assert sorted(p for ps in partitions for p in ps) == ["Partition:0", "Partition:1"]
    values = sorted(line.split("\t")[1] for text in texts for line in text)
    assert values == sorted(r.split(":")[1] for r in records)
    # Both committed and left: the group is Empty with every record committed.
    final = json.loads(_ok(tidelog("groups", "describe", *bs, "--group", "rec-g2", "--json")))[0]
    assert final["state"] == "Empty"
    assert sum(p["current_offset"] for p in final["partitions"]) == len(records)


def _txn_producer(broker: BrokerProcess, txn_id: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id, "linger.ms": 5}
    )
    producer.init_transactions(60)
    return producer


def test_read_committed_hides_aborted_and_open_transactions(
    broker: BrokerProcess, tidelog: Tidelog
) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    topic = "rec-txn"
    _create(tidelog, broker, topic)

    def plain(value: str) -> None:
        _produce(broker, topic, [("k", value)])

    plain("c1")
    producer = _txn_producer(broker, "rec-txn")
    producer.begin_transaction()
    for value in (b"a1", b"a2"):
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    producer.abort_transaction(30)
    plain("c2")
    producer.begin_transaction()
    producer.produce(topic, b"o1", partition=0)
    assert producer.flush(30) == 0
    plain("c3")

    def consume(isolation: str) -> list[str]:
        return _ok(
            tidelog(
                "consume", *bs, "--topic", topic, "--from-beginning", "--timeout-ms", "1000",
                "--isolation-level", isolation,
            )
        ).splitlines()  # fmt: skip

    assert consume("read_uncommitted") == ["c1", "a1", "a2", "c2", "o1", "c3"]
    # Up to the open transaction's first offset (the last stable offset), aborted records out.
    assert consume("read_committed") == ["c1", "c2"]
    producer.commit_transaction(30)
    assert consume("read_committed") == ["c1", "c2", "o1", "c3"]


def test_bad_options_say_what_is_wrong(broker: BrokerProcess, tidelog: Tidelog) -> None:
    bs = ("--bootstrap-server", broker.bootstrap)
    _create(tidelog, broker, "rec-bad")

    unknown = tidelog("produce", *bs, "--topic", "rec-bad", "--property", "parse.kye=true")
    assert unknown.returncode == 2
    assert unknown.stderr.startswith(
        "tidelog produce: error: --property 'parse.kye' is not a property this command reads\n"
    )
    no_headers = tidelog(
        "produce", *bs, "--topic", "rec-bad", "--property", "parse.headers=true", input="v\n"
    )
    assert no_headers.returncode == 1
    assert no_headers.stderr.startswith(
        "tidelog produce: error: No headers delimiter found on line number 1: 'v'"
    )
    both = tidelog("consume", *bs, "--topic", "rec-bad", "--group", "g", "--partition", "0")
    assert both.returncode == 2
    assert "Options group and partition cannot be specified together." in both.stderr
    no_reset = tidelog(
        "consume", *bs, "--topic", "rec-bad", "--group", "rec-g3",
        "--consumer-property", "auto.offset.reset=none", "--timeout-ms", "500",
    )  # fmt: skip
    assert no_reset.returncode == 1
    assert no_reset.stderr.startswith(
        "tidelog consume: error: Undefined offset with no reset policy for partitions: [rec-bad-0]"
    )
    bad_codec = tidelog("produce", *bs, "--topic", "rec-bad", "--compression-codec", "brotli")
    assert bad_codec.returncode == 2
    assert "invalid choice: 'brotli'" in bad_codec.stderr
