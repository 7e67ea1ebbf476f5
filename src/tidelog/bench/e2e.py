"""One end-to-end measurement: a fixed-rate acks=all producer and a consumer in two spawned
processes, latency from send to the consumer's hands. The tidelog rows, the security section
and the bench against an existing cluster all measure with it, so their figures compare.

Rules:

1. The consumer process starts first and gets 3 s to import and join before the first send.
2. The first second of records (``rate`` of them) is warm-up (connections, metadata) and is
   left out of both latency summaries.
3. ``client_cpu_s`` is the two load generators' own CPU, so a row limited by its client shows.
4. With the brokers' PIDs (a cluster the bench started), ``broker_cpu_s`` is their CPU over
   the whole measurement (the consumer's start included) and ``broker_cpu_ms_per_1k`` that
   per thousand records sent: the brokers' cost per record at a fixed rate, which moves
   less from run to run than a latency tail.
"""

from __future__ import annotations

import multiprocessing
import time
from array import array
from collections.abc import Mapping, Sequence
from typing import Any, Final

from tidelog.bench.client_settings import run_with_settings
from tidelog.bench.common import Latency, cpu_seconds, settle
from tidelog.bench.kafka import e2e_consumer_worker, fixed_rate_producer

#: Size of an end-to-end row's records.
E2E_RECORD_BYTES: Final = 100


def summarise_e2e(sent: Mapping[str, Any], got: Mapping[str, Any], rate: int) -> dict[str, Any]:
    """An end-to-end row's values from ``fixed_rate_producer`` and ``e2e_consumer_worker``
    results: produce->consume and send->ack latency, less the warm-up (rule 2)."""
    lat: array[float] = array("d")
    lat.frombytes(got["latencies"])
    summary = Latency.of_seconds(lat[min(len(lat), rate) :])
    ack_lat: array[float] = array("d")
    ack_lat.frombytes(sent["ack_latencies"])
    ack = Latency.of_seconds(ack_lat[min(len(ack_lat), rate) :])
    return {
        "rate": rate,
        "record_bytes": E2E_RECORD_BYTES,
        "sent": sent["sent"],
        "errors": sent["errors"],
        "unflushed": sent["unflushed"],
        "received": got["received"],
        "measured": summary.count,
        "latency_ms": summary.tail_ms(),
        "produce_ack_latency_ms": {"p50": ack.p50_ms, "p99": ack.p99_ms, "p99.9": ack.p999_ms},
    }


def measure_e2e(
    settings: Mapping[str, str],
    bootstrap: str,
    topic: str,
    partitions: Sequence[int],
    *,
    rate: int,
    seconds: float,
    broker_pids: Sequence[int] = (),
) -> dict[str, Any]:
    """Rules 1-4 on ``topic`` at ``rate`` records/s for ``seconds``, the clients with
    ``settings`` (empty for plaintext): the row's values, with ``settled`` (the machine's
    write-back before the run, ``bench.common.settle``), ``client_cpu_s`` and, given
    ``broker_pids``, the brokers' CPU."""
    conf = dict(settings)
    parts = list(partitions)
    total = int(rate * seconds)
    settled = settle()
    broker_before = sum(cpu_seconds(pid) for pid in broker_pids)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        consumer = pool.apply_async(
            run_with_settings,
            (conf, e2e_consumer_worker, bootstrap, topic, parts, total, seconds + 60),
        )
        time.sleep(3.0)  # rule 1
        producer = pool.apply_async(
            run_with_settings,
            (conf, fixed_rate_producer, bootstrap, topic, parts, rate, seconds, E2E_RECORD_BYTES),
        )
        sent = producer.get(seconds + 120)
        got = consumer.get(seconds + 120)
    broker_cpu_s = sum(cpu_seconds(pid) for pid in broker_pids) - broker_before
    values = summarise_e2e(sent, got, rate)
    values["settled"] = settled
    values["client_cpu_s"] = round(sent["client_cpu_s"] + got["client_cpu_s"], 2)
    if broker_pids and sent["sent"]:
        values["broker_cpu_s"] = round(broker_cpu_s, 2)
        values["broker_cpu_ms_per_1k"] = round(broker_cpu_s * 1e6 / sent["sent"], 2)
    return values


def e2e_line(system: str, rate: int, values: Mapping[str, Any]) -> str:
    """The progress line of one end-to-end row."""
    lat = values["latency_ms"]
    ack = values["produce_ack_latency_ms"]
    cost = values.get("broker_cpu_ms_per_1k")
    return (
        f"{system} e2e {rate} rec/s: received {values['received']}/{values['sent']}, p50 "
        f"{lat['p50']:.1f} ms p99 {lat['p99']:.1f} ms p99.9 {lat['p99.9']:.1f} ms "
        f"(send->ack p50 {ack['p50']:.1f} ms p99 {ack['p99']:.1f} ms)"
        + ("" if cost is None else f", brokers {cost:.0f} ms CPU per 1,000 records")
    )
