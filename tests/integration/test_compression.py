"""Compression against one real broker process: confluent-kafka, kafka-python, aiokafka and
kcat each produce with gzip, snappy, lz4 and zstd, and each reads every record back; a
topic's compression.type recompresses on append; a corrupt compressed batch gets
CORRUPT_MESSAGE while the broker keeps serving; KIP-110's version gates for zstd; and
``tidelog dump-log`` on the broker's own segment files and on a damaged copy."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import BrokerProcess, api_versions_round_trip
from tests.integration.rawclient import Raw, create, fetch, produce
from tidelog.client.records import Record, build_batch, decode_records
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.records import BATCH_HEADER_SIZE, Compression, iter_batches
from tidelog.storage.compression import compress

pytestmark = pytest.mark.integration

CODECS = ("gzip", "snappy", "lz4", "zstd")
CLIENTS = ("confluent", "kafka-python", "aiokafka", "kcat")
PER_CLIENT = 8
SEGMENT = "00000000000000000000.log"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def value(client: str, codec: str, i: int) -> str:
    # Compressible, so that librdkafka (which sends a batch uncompressed when compressing
    # does not shrink it) really compresses.
    return f"{client}/{codec}/{i} " + "the quick brown fox jumps over the lazy dog " * 6


def create_topics(broker: BrokerProcess, names: list[str], **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(n, 1, 1, config=configs) for n in names])
    for future in futures.values():
        future.result(timeout=10)


def produce_confluent(broker: BrokerProcess, topic: str, codec: str) -> None:
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 5}
    )
    for i in range(PER_CLIENT):
        producer.produce(topic, key=b"c%d" % i, value=value("confluent", codec, i).encode())
    assert producer.flush(15) == 0


def produce_kafka_python(broker: BrokerProcess, topic: str, codec: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=5, acks="all"
    )
    futures = [
        producer.send(topic, key=b"p%d" % i, value=value("kafka-python", codec, i).encode())
        for i in range(PER_CLIENT)
    ]
    for future in futures:
        future.get(timeout=10)
    producer.close()


async def produce_aiokafka(broker: BrokerProcess, topics: dict[str, str]) -> None:
    import aiokafka

    for codec, topic in topics.items():
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=5
        )
        await producer.start()
        try:
            batch = producer.create_batch()
            for i in range(PER_CLIENT):
                assert batch.append(
                    key=b"a%d" % i, value=value("aiokafka", codec, i).encode(), timestamp=None
                )
            await (await producer.send_batch(batch, topic, partition=0))
        finally:
            await producer.stop()


def produce_kcat(broker: BrokerProcess, topic: str, codec: str) -> None:
    lines = "".join(f"k{i}:{value('kcat', codec, i)}\n" for i in range(PER_CLIENT))
    subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-K", ":", "-z", codec],
        input=lines,
        text=True,
        check=True,
        timeout=30,
    )


@pytest.fixture(scope="module")
def topics(broker: BrokerProcess) -> dict[str, str]:
    """One topic per codec, into which every client produced PER_CLIENT records with it (in
    CLIENTS order)."""
    by_codec = {codec: unique(f"codec-{codec}") for codec in CODECS}
    create_topics(broker, list(by_codec.values()))
    for codec, topic in by_codec.items():
        produce_confluent(broker, topic, codec)
        produce_kafka_python(broker, topic, codec)
    asyncio.run(produce_aiokafka(broker, by_codec))
    for codec, topic in by_codec.items():
        produce_kcat(broker, topic, codec)
    return by_codec


def expected(codec: str) -> list[str]:
    return [value(client, codec, i) for client in CLIENTS for i in range(PER_CLIENT)]


TOTAL = len(CLIENTS) * PER_CLIENT


def test_confluent_reads_every_codec(broker: BrokerProcess, topics: dict[str, str]) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": unique("g"),
            "enable.auto.commit": False,
        }
    )
    consumer.assign([CTopicPartition(t, 0, 0) for t in topics.values()])
    got: dict[str, list[str]] = {t: [] for t in topics.values()}
    deadline = time.monotonic() + 15
    try:
        while sum(map(len, got.values())) < TOTAL * len(topics) and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                got[m.topic() or ""].append((m.value() or b"").decode())
    finally:
        consumer.close()
    assert {codec: got[topic] for codec, topic in topics.items()} == {
        codec: expected(codec) for codec in topics
    }


def test_kafka_python_reads_every_codec(broker: BrokerProcess, topics: dict[str, str]) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
    consumer.assign([KTopicPartition(t, 0) for t in topics.values()])
    consumer.seek_to_beginning()
    got: dict[str, list[str]] = {t: [] for t in topics.values()}
    deadline = time.monotonic() + 15
    while sum(map(len, got.values())) < TOTAL * len(topics) and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=500).items():
            got[tp.topic] += [r.value.decode() for r in records]
    consumer.close()
    assert {codec: got[topic] for codec, topic in topics.items()} == {
        codec: expected(codec) for codec in topics
    }


def test_aiokafka_reads_every_codec(broker: BrokerProcess, topics: dict[str, str]) -> None:
    import aiokafka

    async def scenario() -> dict[str, list[str]]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
        await consumer.start()
        got: dict[str, list[str]] = {t: [] for t in topics.values()}
        try:
            consumer.assign([aiokafka.TopicPartition(t, 0) for t in topics.values()])
            await consumer.seek_to_beginning()
            deadline = time.monotonic() + 15
            while sum(map(len, got.values())) < TOTAL * len(topics):
                assert time.monotonic() < deadline, got
                for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                    got[tp.topic] += [r.value.decode() for r in records if r.value]
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(scenario())
    assert {codec: got[topic] for codec, topic in topics.items()} == {
        codec: expected(codec) for codec in topics
    }


def test_kcat_reads_every_codec(broker: BrokerProcess, topics: dict[str, str]) -> None:
    for codec, topic in topics.items():
        out = subprocess.run(
            ["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-e", "-J", "-o", "beginning"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        records = [json.loads(line) for line in out.splitlines() if line.strip()]
        assert [r["payload"] for r in records] == expected(codec), codec
        assert [r["offset"] for r in records] == list(range(TOTAL))


def dump_log(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidelog", "dump-log", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_every_client_batch_is_stored_with_its_codec(
    broker: BrokerProcess, topics: dict[str, str]
) -> None:
    """``dump-log`` on the broker's own segment files: every batch of every client carries
    the codec it was produced with (compression.type=producer keeps it)."""
    for codec, topic in topics.items():
        done = dump_log(broker.log_dir / f"{topic}-0" / SEGMENT, "--deep-iteration")
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        batches = [line for line in done.stdout.splitlines() if line.startswith("baseOffset")]
        assert len(batches) >= len(CLIENTS)
        assert all(f"compresscodec: {codec} " in b for b in batches), batches
        assert all(b.endswith("isvalid: true") for b in batches)
        records = [line for line in done.stdout.splitlines() if line.startswith("| offset:")]
        assert len(records) == TOTAL


@pytest.mark.parametrize(
    ("compression_type", "producer_codec", "stored"),
    [
        ("zstd", "gzip", Compression.ZSTD),
        ("uncompressed", "lz4", Compression.NONE),
        ("gzip", None, Compression.GZIP),
    ],
)
def test_topic_compression_type_recompresses_on_append(
    broker: BrokerProcess, compression_type: str, producer_codec: str | None, stored: int
) -> None:
    from kafka import KafkaProducer

    topic = unique(f"recompress-{compression_type}")
    create_topics(broker, [topic], **{"compression.type": compression_type})
    producer = KafkaProducer(  # idempotent (acks=all): the recompressed batch keeps its ids
        bootstrap_servers=broker.bootstrap, compression_type=producer_codec, acks="all"
    )
    values = [value("kafka-python", str(producer_codec), i).encode() for i in range(20)]
    futures = [producer.send(topic, key=b"k", value=v) for v in values]
    assert [f.get(timeout=10).offset for f in futures] == list(range(20))
    producer.close()
    raw = Raw(broker)
    part = fetch(raw, topic, 0, 0)
    raw.close()
    assert part.error_code == ErrorCode.NONE
    headers = [h for _pos, h in iter_batches(part.records)]
    assert {h.compression for h in headers} == {stored}
    assert all(h.producer_id >= 0 and h.base_sequence >= 0 for h in headers)
    assert [r.value for r in decode_records(part.records)] == values
    done = dump_log(broker.log_dir / f"{topic}-0" / SEGMENT)
    assert done.returncode == 0
    name = {0: "none", 1: "gzip", 4: "zstd"}[stored]
    assert f"compresscodec: {name} " in done.stdout


def test_altering_compression_type_recompresses_later_batches(broker: BrokerProcess) -> None:
    """IncrementalAlterConfigs compression.type=zstd on a live topic: batches appended
    afterwards are stored as zstd, earlier ones keep the producer's codec."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    topic = unique("recompress-altered")
    create_topics(broker, [topic])

    def produce(tag: str) -> list[bytes]:
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "compression.type": "gzip", "linger.ms": 5}
        )
        values = [value("confluent", tag, i).encode() for i in range(20)]
        for v in values:
            producer.produce(topic, v, key=b"k")
        assert producer.flush(30) == 0
        return values

    before = produce("before")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entry = ConfigEntry("compression.type", "zstd", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("TOPIC", topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    after = produce("after")
    raw = Raw(broker)
    part = fetch(raw, topic, 0, 0)
    raw.close()
    assert part.error_code == ErrorCode.NONE
    codecs = [h.compression for _pos, h in iter_batches(part.records)]
    assert codecs[0] == Compression.GZIP
    assert codecs[-1] == Compression.ZSTD
    assert codecs == sorted(codecs, key=lambda c: c == Compression.ZSTD)
    assert [r.value for r in decode_records(part.records)] == before + after


def test_corrupt_compressed_batch_is_corrupt_message_and_the_broker_serves(
    broker: BrokerProcess,
) -> None:
    raw = Raw(broker)
    topic = unique("corrupt")
    assert create(raw, topic).error_code == ErrorCode.NONE
    good = build_batch([Record(b"kept", key=b"k")], compression=Compression.GZIP)
    assert produce(raw, topic, 0, good).error_code == ErrorCode.NONE
    # A gzip batch whose payload is garbage, with a CRC-32C that matches it: only
    # decompressing shows what is wrong.
    bad = build_batch([Record(b"x" * 200)], compression=Compression.GZIP)
    payload = bytearray(bad[BATCH_HEADER_SIZE:])
    payload[len(payload) // 2 :] = bytes(len(payload) - len(payload) // 2)
    corrupt = _rebuild(bad, bytes(payload))
    response = produce(raw, topic, 0, corrupt)
    assert response.error_code == ErrorCode.CORRUPT_MESSAGE
    assert "does not decompress" in response.error_message
    # A zip bomb: 80 KiB of zstd that would be 128 MiB of records.
    bomb = _rebuild(bad, compress(Compression.ZSTD, bytes(128 << 20)), codec=Compression.ZSTD)
    assert len(bomb) < 100_000
    assert produce(raw, topic, 0, bomb).error_code == ErrorCode.RECORD_LIST_TOO_LARGE
    part = fetch(raw, topic, 0, 0)
    raw.close()
    assert (part.error_code, part.high_watermark) == (ErrorCode.NONE, 1)
    assert [r.value for r in decode_records(part.records)] == [b"kept"]
    assert broker.alive()
    assert api_versions_round_trip(broker.host, broker.port)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = [line for line in broker.output().splitlines() if f"produce to {topic}-0" in line]
        if len(lines) == 2:
            break
        time.sleep(0.1)
    assert len(lines) == 2, lines  # one line per refused produce, no traceback
    assert "does not decompress" in lines[0]
    assert "Traceback" not in broker.output()


def _rebuild(batch: bytes, payload: bytes, codec: int | None = None) -> bytes:
    import struct

    import crc32c

    out = bytearray(batch[:BATCH_HEADER_SIZE] + payload)
    struct.pack_into(">i", out, 8, len(out) - 12)
    if codec is not None:
        (attributes,) = struct.unpack_from(">h", out, 21)
        struct.pack_into(">h", out, 21, (attributes & ~7) | codec)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def test_kip110_zstd_needs_produce_v7_and_fetch_v10(broker: BrokerProcess) -> None:
    raw = Raw(broker)
    topic = unique("kip110")
    assert create(raw, topic).error_code == ErrorCode.NONE
    zstd = build_batch([Record(b"z" * 100)], compression=Compression.ZSTD)
    request = {
        "acks": 1,
        "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": zstd}]}],
    }

    def first_partition(body: Any) -> Any:
        return body.responses[0].partition_responses[0]

    # KAFKA-18659: Produce advertised from v0 (librdkafka 2.0, kcat's, compresses only then).
    versions = raw.call(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
    )
    ranges = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert ranges[ApiKey.PRODUCE][0] == 0
    old = first_partition(raw.call(ApiKey.PRODUCE, 6, request))
    assert old.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert first_partition(raw.call(ApiKey.PRODUCE, 7, request)).error_code == ErrorCode.NONE
    fetch_request = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
        ],
    }
    old_fetch = raw.call(ApiKey.FETCH, 9, fetch_request).responses[0].partitions[0]
    assert old_fetch.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert not old_fetch.records
    new_fetch = raw.call(ApiKey.FETCH, 10, fetch_request).responses[0].partitions[0]
    assert new_fetch.error_code == ErrorCode.NONE
    assert [r.value for r in decode_records(new_fetch.records)] == [b"z" * 100]
    raw.close()


def test_dump_log_on_broker_files_and_a_damaged_copy(
    broker: BrokerProcess, topics: dict[str, str], tmp_path: Path
) -> None:
    directory = broker.log_dir / f"{topics['zstd']}-0"
    index_files = [
        directory / "00000000000000000000.index",
        directory / "00000000000000000000.timeindex",
    ]
    done = dump_log(*index_files, directory / "00000000000000000000.txnindex")
    assert done.returncode == 0, done.stderr
    done = dump_log("--index-sanity-check", *index_files)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("passed sanity check.") + done.stdout.count("is empty.") == 2
    copy = tmp_path / SEGMENT
    shutil.copyfile(directory / SEGMENT, copy)
    size = copy.stat().st_size
    with copy.open("r+b") as f:
        f.truncate(size - 7)
    done = dump_log(copy, "--print-data-log")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    (problem,) = done.stderr.splitlines()
    assert problem.startswith("Found ")
    assert f"invalid bytes at the end of {SEGMENT}: at position " in problem
    assert "declares" in problem  # the last batch declares more bytes than remain
