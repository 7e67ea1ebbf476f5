"""One tidelog broker, confluent-kafka clients: produce and consumer catch-up throughput.

    .venv/bin/python benchmarks/bench_broker.py [--seconds 8] [--event-loop uvloop|asyncio]

For each record size (100 B and 10 KiB): a confluent-kafka Producer with acks=1 sends for
``--seconds`` (records/s and MB/s of acknowledged records, from first send to the last
delivery report), then a fresh Consumer reads the whole partition from the earliest offset
(catch-up records/s and MB/s). Beside them, from the same run and the same disk: raw
buffered 1 MiB writes to a file (the ceiling any log can reach here) and in-process
``Log.append_as_leader`` of 1 MiB batches (storage without the network).

The broker is a real process on a free loopback port, started and stopped by PID.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.harness import BrokerProcess

from tidelog.client.records import Record, build_batch
from tidelog.storage.log import Log, LogConfig

MB = 1_000_000


def raw_write_mb_s(directory: Path, total_bytes: int = 512 * 1024 * 1024) -> float:
    """Buffered 1 MiB writes to one file (no fsync), MB/s."""
    chunk = os.urandom(1 << 20)
    path = directory / "raw-write.bin"
    start = time.perf_counter()
    with open(path, "wb") as f:
        written = 0
        while written < total_bytes:
            f.write(chunk)
            written += len(chunk)
    elapsed = time.perf_counter() - start
    path.unlink()
    return written / elapsed / MB


def storage_append_mb_s(directory: Path, total_bytes: int = 512 * 1024 * 1024) -> float:
    """``Log.append_as_leader`` of ~1 MiB batches of 1 KiB records, MB/s."""
    batch = build_batch([Record(value=os.urandom(1000)) for _ in range(1000)], base_timestamp_ms=1)
    log = Log.open(directory / "bench-0", LogConfig(), now_ms=int(time.time() * 1000))
    start = time.perf_counter()
    written = 0
    while written < total_bytes:
        log.append_as_leader(batch, leader_epoch=0, now_ms=int(time.time() * 1000))
        written += len(batch)
    elapsed = time.perf_counter() - start
    log.delete()
    return written / elapsed / MB


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(
    bootstrap: str, topic: str, size: int, seconds: float, partition: int = 0
) -> tuple[int, float]:
    """Send for ``seconds``; return (acknowledged records, elapsed until the last ack)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "queue.buffering.max.messages": 1_000_000,
            "delivery.report.only.error": True,
            "on_delivery": lambda err, _msg: errors.append(err),
        }
    )
    errors: list[object] = []
    value = os.urandom(size)
    sent = 0
    start = time.perf_counter()
    stop = start + seconds
    while time.perf_counter() < stop:
        for _ in range(1000):
            try:
                producer.produce(topic, value, partition=partition)
                sent += 1
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    if errors or remaining:
        raise RuntimeError(f"{len(errors)} delivery errors, {remaining} unflushed: {errors[:3]}")
    return sent, elapsed


def produce_parallel(
    bootstrap: str, topic: str, size: int, seconds: float, processes: int
) -> tuple[int, float]:
    """``processes`` producer processes, one partition each; (total records, longest time)."""
    if processes == 1:
        return produce(bootstrap, topic, size, seconds)
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        results = pool.starmap(
            produce, [(bootstrap, topic, size, seconds, p) for p in range(processes)]
        )
    return sum(r[0] for r in results), max(r[1] for r in results)


def request_rate(host: str, port: int, topic: str, seconds: float) -> float:
    """Small pipelined Produce requests (one 100 B record, acks=1) on one connection, up
    to 500 in flight: the broker's per-request cost, since the client only writes
    pre-encoded bytes. Returns answered requests per second."""
    import socket

    from kio.index import load_request_schema

    from tidelog.protocol.codec import RequestHeader, encode_request
    from tidelog.protocol.framing import FrameDecoder
    from tidelog.protocol.messages import build

    records = build_batch([Record(value=b"x" * 100)], base_timestamp_ms=1)
    body = build(
        load_request_schema(0, 9),
        {
            "acks": 1,
            "timeout": 10_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    frame = encode_request(RequestHeader(0, 9, 1, "bench"), body)
    burst = frame * 100
    decoder = FrameDecoder(1 << 30)
    answered = sent = 0
    with socket.create_connection((host, port)) as sock:
        start = time.perf_counter()
        stop = start + seconds
        while True:
            now = time.perf_counter()
            if now < stop and sent - answered <= 400:
                sock.sendall(burst)
                sent += 100
                continue
            if answered >= sent:
                break
            answered += len(decoder.feed(sock.recv(1 << 20)))
        elapsed = time.perf_counter() - start
    return answered / elapsed


def catch_up(bootstrap: str, topic: str, expected: int, partitions: int = 1) -> float:
    """Read the partition from the earliest offset to ``expected`` records; seconds taken."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
            "queued.max.messages.kbytes": 1_048_576,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    start = time.perf_counter()
    deadline = start + 300
    while got < expected and time.perf_counter() < deadline:
        for m in consumer.consume(num_messages=10_000, timeout=1.0):
            if m.error() is None:
                got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if got < expected:
        raise RuntimeError(f"caught up only {got} of {expected}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--event-loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--sizes", default="100,10240")
    parser.add_argument(
        "--producers",
        type=int,
        default=1,
        help="producer processes in parallel (one partition each), to find the broker's limit",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidelog-bench-") as tmp:
        directory = Path(tmp)
        raw = raw_write_mb_s(directory)
        appended = storage_append_mb_s(directory)
        print(f"raw buffered 1 MiB writes:        {raw:8.0f} MB/s")
        print(f"Log.append_as_leader (1 MiB):     {appended:8.0f} MB/s")
        broker = BrokerProcess(
            directory / "broker",
            {"message.max.bytes": "10485760"},
            event_loop=args.event_loop,
        ).start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for size in (int(s) for s in args.sizes.split(",")):
                topic = f"bench-{size}"
                admin.create_topics([NewTopic(topic, args.producers, 1)])[topic].result(10)
                pid = broker.process.pid if broker.process else 0
                cpu0 = cpu_seconds(pid)
                sent, elapsed = produce_parallel(
                    broker.bootstrap, topic, size, args.seconds, args.producers
                )
                cpu1 = cpu_seconds(pid)
                rate = sent / elapsed
                print(
                    f"produce {size:>6} B acks=1 x{args.producers} ({args.event_loop}): "
                    f"{rate:10.0f} records/s {rate * size / MB:8.1f} MB/s  "
                    f"({sent} records in {elapsed:.1f} s, broker CPU {(cpu1 - cpu0) / elapsed:.0%})"
                )
                took = catch_up(broker.bootstrap, topic, sent, args.producers)
                cpu2 = cpu_seconds(pid)
                print(
                    f"catch-up {size:>5} B ({args.event_loop}):       "
                    f"{sent / took:10.0f} records/s {sent * size / took / MB:8.1f} MB/s  "
                    f"({took:.1f} s, broker CPU {(cpu2 - cpu1) / took:.0%})"
                )
            topic = "bench-requests"
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
            pid = broker.process.pid if broker.process else 0
            cpu0 = cpu_seconds(pid)
            started = time.perf_counter()
            rate = request_rate(broker.host, broker.port, topic, args.seconds)
            cpu = (cpu_seconds(pid) - cpu0) / (time.perf_counter() - started)
            print(
                f"pipelined 1-record Produce requests ({args.event_loop}): {rate:8.0f} requests/s"
                f"  (broker CPU {cpu:.0%})"
            )
            del admin
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
