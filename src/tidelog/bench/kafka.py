"""Kafka-protocol load: confluent-kafka producers and consumers in their own processes.

Each worker is a top-level function run in a ``spawn``ed process (so the load generator
is not bound by the benchmark's own GIL) and returns plain data. Latency of a produce is
librdkafka's ``Message.latency()``: from the moment ``produce()`` accepted the record into
librdkafka's queue (``rkm_ts_enq``; a ``BufferError`` retry starts a new clock) to the
delivery report's callback, which for acks=all runs after the leader saw
min.insync.replicas in-sync copies — what kafka-producer-perf-test reports.
"""

# Optional dependencies (the bench extra) load lazily; workers take positional arguments
# because they run through multiprocessing's starmap.
# ruff: noqa: PLC0415, PLR0917

from __future__ import annotations

import multiprocessing
import os
import random
import struct
import time
from array import array
from collections.abc import Callable, Sequence
from typing import Any, Final

from tidelog.bench.common import (
    MB,
    WINDOW_BYTES,
    WINDOW_RECORDS_MAX,
    Latency,
    ProcessCpu,
    client_cpu,
    window,
)

#: librdkafka settings of every producer here: batches up to 1 MB, a short linger, no
#: compression, and the bench's in-flight window as its queue (``bench.common.window``), so
#: latency includes queueing as kafka-producer-perf-test's does at full speed.
PRODUCER_BASE: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "compression.type": "none",
    "queue.buffering.max.kbytes": WINDOW_BYTES // 1024,
    "queue.buffering.max.messages": WINDOW_RECORDS_MAX,
    "message.timeout.ms": 120_000,
}


#: What a produce row's latency runs from and to (recorded in the row as ``timer``).
PRODUCE_TIMER: Final = "produce() accepted the record into librdkafka's queue -> delivery report"

#: Distinct text payloads a compressing producer cycles through (at most this many bytes).
_TEXT_POOL_BYTES: Final = 16 * MB


def text_payloads(size: int, seed: int = 0) -> list[bytes]:
    """Distinct ``size``-byte records of JSON-like event lines with random ids and times:
    what compressing producers typically carry (lz4 keeps ~43% of a batch, zstd ~25%),
    unlike ``os.urandom`` bytes, which no codec shrinks (librdkafka then sends the batch
    uncompressed). Several of them, so a batch is not one record repeated."""
    rng = random.Random(seed)
    paths = ("/", "/cart", "/checkout", "/search", "/products/{}", "/account/orders/{}")
    events = ("page_view", "click", "add_to_cart", "purchase", "scroll")
    out: list[bytes] = []
    for _ in range(max(16, min(1000, _TEXT_POOL_BYTES // max(1, size)))):
        text = bytearray()
        while len(text) < size:
            text += (
                f'{{"event":"{rng.choice(events)}","user":"u{rng.randrange(10**6):06d}",'
                f'"session":"{rng.getrandbits(64):016x}",'
                f'"path":"{rng.choice(paths).format(rng.randrange(10**5))}",'
                f'"ts":{1_700_000_000_000 + rng.randrange(10**9)}}}\n'
            ).encode()
        out.append(bytes(text[:size]))
    return out


def produce_worker(
    bootstrap: str,
    topic: str,
    size: int,
    seconds: float,
    acks: str,
    partitions: Sequence[int],
    compression: str = "none",
    payload: str = "random",
) -> dict[str, Any]:
    """Send ``size``-byte records round-robin over ``partitions`` as fast as the queue lets
    for ``seconds``; returns counts, elapsed time and every delivery latency (seconds).
    ``compression``: the producer's compression.type; ``payload``: ``random`` (one random
    record, sent again and again) or ``text`` (``text_payloads``, cycled)."""
    from confluent_kafka import Producer

    latencies = array("d")
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            latencies.append(msg.latency())
        else:
            errors.append(str(err))

    producer = Producer(
        {
            **PRODUCER_BASE,
            "compression.type": compression,
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "on_delivery": on_delivery,
        }
    )
    values = text_payloads(size, os.getpid()) if payload == "text" else [os.urandom(size)]
    m = len(values)
    sent = 0
    parts = list(partitions)
    n = len(parts)
    cpu = ProcessCpu()
    start = time.perf_counter()
    stop = start + seconds
    # Acknowledgements over time: (seconds since start, acks so far), sampled once per
    # 500 records sent (one clock read per batch, not per delivery), then during the flush.
    progress = array("d")
    while (now := time.perf_counter()) < stop:
        progress.extend((now - start, float(len(latencies))))
        for _ in range(500):
            try:
                producer.produce(topic, values[sent % m], partition=parts[sent % n])
                sent += 1
            except BufferError:
                producer.poll(0.005)
        producer.poll(0)
    remaining = len(producer)
    while remaining and time.perf_counter() < stop + 180:
        remaining = producer.flush(0.1)
        progress.extend((time.perf_counter() - start, float(len(latencies))))
    elapsed = time.perf_counter() - start
    progress.extend((elapsed, float(len(latencies))))
    return {
        "sent": sent,
        "acked": len(latencies),
        "errors": len(errors),
        "first_errors": errors[:3],
        "unflushed": remaining,
        "elapsed": elapsed,
        "cpu_s": cpu.seconds(),
        "latencies": latencies.tobytes(),
        "progress": progress.tobytes(),
        "window": window(size),
        "timer": PRODUCE_TIMER,
    }


def run_parallel(
    fn: Callable[..., dict[str, Any]], args: list[tuple[Any, ...]]
) -> list[dict[str, Any]]:
    """Run ``fn(*a)`` for each ``a`` in its own spawned process; results in order."""
    if len(args) == 1:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(1) as pool:
            return [pool.apply(fn, args[0])]
    with multiprocessing.get_context("spawn").Pool(len(args)) as pool:
        return pool.starmap(fn, args)


def summarise_produce(results: list[dict[str, Any]], size: int) -> dict[str, Any]:
    """Merge producer results: records/s and MB/s of acknowledged records, latency, the
    producers' CPU (``client_cpu``), and the window and timer they ran with."""
    acked = sum(r["acked"] for r in results)
    elapsed = max(r["elapsed"] for r in results)
    lat: array[float] = array("d")
    for r in results:
        lat.frombytes(r["latencies"])
    latency = Latency.of_seconds(lat)
    per_second = acks_per_second(results)
    return {
        "records": acked,
        "sent": sum(r["sent"] for r in results),
        "errors": sum(r["errors"] for r in results),
        "first_errors": [e for r in results for e in r["first_errors"]][:3],
        "seconds": elapsed,
        "records_per_s": acked / elapsed,
        "mb_per_s": acked * size / elapsed / MB,
        "latency_ms": latency.all_ms(),
        **({"acks_per_second": per_second} if per_second else {}),
        **client_cpu(results),
        **{k: results[0][k] for k in ("window", "timer") if k in results[0]},
    }


def acks_per_second(results: list[dict[str, Any]]) -> list[int]:
    """Acknowledged records in each whole second of the row, summed over its producers,
    from each producer's ``progress`` samples (acks so far, read at a sample's time: the
    count at the end of second k is the last sample at or before k). Empty when no result
    has samples (a results file without them)."""
    totals: list[int] = []
    for r in results:
        raw = r.get("progress")
        if not raw:
            continue
        samples: array[float] = array("d")
        samples.frombytes(raw)
        times, counts = samples[0::2], samples[1::2]
        seconds = int(times[-1]) if times else 0
        series: list[int] = []
        i, last = 0, 0.0
        for k in range(1, seconds + 1):
            while i < len(times) and times[i] <= k:
                last = counts[i]
                i += 1
            series.append(int(last))
        per = [b - a for a, b in zip([0, *series], series, strict=False)]
        if len(per) > len(totals):
            totals += [0] * (len(per) - len(totals))
        for k, v in enumerate(per):
            totals[k] += v
    return totals


def perf_test_line(values: dict[str, Any]) -> str:
    """The summary line kafka-producer-perf-test prints."""
    lat = values["latency_ms"]
    return (
        f"{values['records']} records sent, {values['records_per_s']:.1f} records/sec "
        f"({values['mb_per_s']:.2f} MB/sec), {lat['avg']:.2f} ms avg latency, "
        f"{lat['max']:.2f} ms max latency, {lat['p50']:.0f} ms 50th, {lat['p95']:.0f} ms 95th, "
        f"{lat['p99']:.0f} ms 99th, {lat['p99.9']:.0f} ms 99.9th."
    )


def catch_up_worker(
    bootstrap: str, topic: str, partitions: Sequence[int], expected: int, timeout_s: float
) -> dict[str, Any]:
    """A fresh consumer reads ``partitions`` from the earliest offset until ``expected``
    records arrived; returns records, bytes and seconds."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-catch-up-{os.getpid()}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
            "queued.max.messages.kbytes": 262_144,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    got = 0
    nbytes = 0
    start = time.perf_counter()
    deadline = start + timeout_s
    while got < expected and time.perf_counter() < deadline:
        for m in consumer.consume(num_messages=10_000, timeout=0.5):
            if m.error() is None:
                got += 1
                nbytes += len(m.value() or b"")
    elapsed = time.perf_counter() - start
    consumer.close()
    return {"records": got, "bytes": nbytes, "seconds": elapsed}


def e2e_consumer_worker(
    bootstrap: str,
    topic: str,
    partitions: Sequence[int],
    expected: int,
    timeout_s: float,
    isolation: str | None = None,
) -> dict[str, Any]:
    """Consume records whose first 8 bytes are the producer's ``time.time_ns()``; returns
    produce->consume latencies (seconds). ``isolation`` sets ``isolation.level``; None
    leaves librdkafka's default (read_committed, which over non-transactional records
    reads what read_uncommitted does)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-e2e-{os.getpid()}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            **({} if isolation is None else {"isolation.level": isolation}),
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    latencies = array("d")
    deadline = time.perf_counter() + timeout_s
    # poll() hands over each record as soon as librdkafka has it; consume(num_messages=1000,
    # timeout=0.05) returns only when it has 1,000 records or the timeout passed, which at
    # 1k-10k records/s adds up to 50 ms to the latency measured.
    while len(latencies) < expected and time.perf_counter() < deadline:
        m = consumer.poll(0.05)
        if m is not None and m.error() is None:
            now = time.time_ns()
            (sent,) = struct.unpack_from(">q", m.value() or bytes(8))
            latencies.append((now - sent) / 1e9)
    consumer.close()
    return {"received": len(latencies), "latencies": latencies.tobytes()}


def fixed_rate_producer(
    bootstrap: str, topic: str, partitions: Sequence[int], rate: int, seconds: float, size: int
) -> dict[str, Any]:
    """acks=all producer that sends ``rate`` records/s (paced every millisecond), each
    starting with ``time.time_ns()``; returns how many were sent and acknowledged."""
    from confluent_kafka import Producer

    errors: list[str] = []
    acks = array("d")

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acks.append(msg.latency())

    producer = Producer(
        {
            **PRODUCER_BASE,
            "linger.ms": 1,
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "on_delivery": on_delivery,
        }
    )
    pad = b"\0" * max(0, size - 8)
    parts = list(partitions)
    sent = 0
    start = time.perf_counter()
    total = int(rate * seconds)
    while sent < total:
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        while sent < due:
            producer.produce(
                topic, struct.pack(">q", time.time_ns()) + pad, partition=parts[sent % len(parts)]
            )
            sent += 1
        producer.poll(0)
        time.sleep(0.001)
    remaining = producer.flush(60)
    return {
        "sent": sent,
        "errors": len(errors),
        "unflushed": remaining,
        "ack_latencies": acks.tobytes(),
    }
