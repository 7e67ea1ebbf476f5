"""``--only zones``: the cost of client quotas on produce, and consuming from a follower
(KIP-392) against consuming from the leader.

One cluster of three brokers on racks ``a``, ``b``, ``c`` with the rack-aware replica
selector. The rows:

1. produce, RF=3 acks=all: first with a default client-id quota that binds (one producer,
   one partition, long enough to be held to it); then over three partitions with no quota
   set, and with a quota far above the rate (every request is accounted, none throttled),
   each twice in the order A B B A. The two side by side are what quota accounting costs
   when no quota limits anyone.
2. a consumer's catch-up over one partition's backlog with ``client.rack`` = the leader's
   rack, and with ``client.rack`` = a follower's rack. librdkafka's statistics say which
   broker the bytes came from, so a row shows that a follower served the reads, not only
   how fast they were.
"""

# Optional dependencies (the bench extra) load lazily; workers take positional arguments
# because they run through multiprocessing's starmap.
# ruff: noqa: PLC0415

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidelog.bench.common import MB, Row, remove_data, settle
from tidelog.bench.kafka import perf_test_line, produce_worker, run_parallel, summarise_produce
from tidelog.bench.launch import ClusterFactory
from tidelog.bench.tidelog_rows import create_topic, size_label
from tidelog.client.client import Client
from tidelog.client.quota_admin import QuotaOp, alter_client_quotas
from tidelog.errors import ErrorCode

Say = Callable[[str], None]

RACKS = ("a", "b", "c")
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
OVERRIDES = {"min.insync.replicas": "2", "replica.selector.class": RACK_AWARE}
#: Kafka's default client-id entity (every client without a more specific quota).
DEFAULT_CLIENT = (("client-id", None),)
#: A quota no producer here reaches: every request is accounted, none throttled.
UNREACHED_BYTES_PER_S = 10.0e9
#: A quota that binds: each producer is held to this many bytes a second.
BINDING_BYTES_PER_S = 2.0 * MB
#: Brokers apply a quota change on its ZooKeeper notification; the rows wait this long.
QUOTA_SETTLE_S = 3.0


def zone_rows(
    launch: ClusterFactory,
    directory: Path,
    seconds: float,
    producers: int,
    say: Say,
    *,
    own_tmp: bool,
) -> list[Row]:
    cluster = launch(directory, brokers=3, overrides=OVERRIDES, racks=RACKS).start(timeout_s=120)
    try:
        bootstrap = cluster.bootstrap_servers
        rows = quota_rows(bootstrap, seconds, producers, say)
        rows += follower_rows(bootstrap, seconds, say)
        return rows
    finally:
        cluster.stop()
        if own_tmp:
            remove_data(directory)


def _set_default_quota(bootstrap: str, value: float | None) -> None:
    async def alter() -> tuple[ErrorCode, str | None]:
        async with Client(bootstrap, client_id="tidelog-bench") as client:
            return await alter_client_quotas(
                client, DEFAULT_CLIENT, [QuotaOp("producer_byte_rate", value)]
            )

    error, message = asyncio.run(alter())
    if error != ErrorCode.NONE:
        raise RuntimeError(f"AlterClientQuotas: {error.name} {message}")
    time.sleep(QUOTA_SETTLE_S)


#: The binding row runs at least this long: Kafka's quota is a rate over 11 one-second
#: windows, and a fresh sensor lets a burst of about ten windows' worth through first.
BINDING_RUN_S = 40.0


def quota_rows(bootstrap: str, seconds: float, producers: int, say: Say) -> list[Row]:
    """The three produce rows of rule 1, 100-byte records.

    The binding row runs first, while no sensor has seen this client's bytes (a sensor
    keeps its rate when the quota changes, as Kafka's does: a row right after a fast one
    would pay for that one's bytes), on one partition (one broker's quota) for at least
    ``BINDING_RUN_S``; its steady rate leaves out the first burst (``steady_mb_per_s``)."""
    size = 100
    binding = f"quota {BINDING_BYTES_PER_S / MB:.0f} MB/s, one partition, one producer"
    unreached = f"quota {UNREACHED_BYTES_PER_S / MB:.0f} MB/s (never reached)"
    # The two unthrottled rows run twice, A B B A: at saturation a row's p99 depends on
    # what ran before it on the same cluster (docs/performance.md, "Quotas and follower
    # reads"), so a fixed order would charge the second row for its place.
    cases: list[tuple[str, float | None, int, float, int]] = [
        (binding, BINDING_BYTES_PER_S, 1, max(seconds, BINDING_RUN_S), 1),
        ("no quota set, 1st", None, 3, seconds, producers),
        (f"{unreached}, 1st", UNREACHED_BYTES_PER_S, 3, seconds, producers),
        (f"{unreached}, 2nd", UNREACHED_BYTES_PER_S, 3, seconds, producers),
        ("no quota set, 2nd", None, 3, seconds, producers),
    ]
    rows: list[Row] = []
    try:
        for i, (label, quota, partitions, run_s, procs) in enumerate(cases):
            _set_default_quota(bootstrap, quota)
            topic = f"zones-quota-{i}"
            create_topic(bootstrap, topic, partitions, 3, min_isr=2)
            parts = list(range(partitions))
            args = [(bootstrap, topic, size, run_s, "all", parts) for _ in range(procs)]
            settled = settle()
            values = summarise_produce(run_parallel(produce_worker, args), size)
            values.update(
                record_bytes=size,
                partitions=partitions,
                producers=procs,
                settled=settled,
                producer_byte_rate=quota,
            )
            note = ""
            if quota == BINDING_BYTES_PER_S:
                steady = steady_mb_per_s(values.get("acks_per_second", []), size)
                values["steady_mb_per_s"] = steady
                note = (
                    f"after the first burst: {steady:.2f} MB/s of record values against a "
                    f"{BINDING_BYTES_PER_S / MB:.0f} MB/s quota on the request bytes (which "
                    "also carry batch and request headers); the whole run's rate includes "
                    "the burst a fresh sensor lets through (Kafka's quota.window.num x "
                    "quota.window.size.seconds = 11 x 1 s)"
                )
            say(f"tidelog zones RF=3 acks=all {size_label(size)} {label}: {perf_test_line(values)}")
            rows.append(
                Row("zones", "tidelog", f"produce RF=3 acks=all 100 B, {label}", values, note=note)
            )
    finally:
        _set_default_quota(bootstrap, None)
    return rows


def steady_mb_per_s(acks_per_second: list[int], size: int) -> float:
    """MB/s of ``size``-byte records acknowledged after the first second that acknowledged
    any, up to the last such second: the rate without the first burst a fresh sensor lets
    through (0.0 with fewer than two such seconds). A throttled librdkafka producer's
    acknowledgements come in bursts of its queue, seconds apart."""
    busy = [k for k, n in enumerate(acks_per_second) if n]
    if len(busy) < 2:
        return 0.0
    first, last = busy[0], busy[-1]
    return sum(acks_per_second[first + 1 : last + 1]) * size / (last - first) / MB


def rack_catch_up_worker(
    bootstrap: str, topic: str, rack: str, expected: int, timeout_s: float
) -> dict[str, Any]:
    """A fresh consumer with ``client.rack`` = ``rack`` reads partition 0 from the earliest
    offset until ``expected`` records arrived; returns records, bytes, seconds and the bytes
    each broker sent it (librdkafka's statistics, ``rxbytes`` per broker)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    received: dict[str, int] = {}

    def on_stats(text: str) -> None:
        for broker in json.loads(text).get("brokers", {}).values():
            if broker.get("nodeid", -1) >= 0:
                received[str(broker["nodeid"])] = int(broker.get("rxbytes", 0))

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-zones-{os.getpid()}",
            "client.rack": rack,
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
            "max.partition.fetch.bytes": 10_485_760,
            "queued.max.messages.kbytes": 262_144,
            "statistics.interval.ms": 500,
            "stats_cb": on_stats,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
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
    # One more statistics interval, so the last fetches are counted.
    end = time.perf_counter() + 1.2
    while time.perf_counter() < end:
        consumer.poll(0.1)
    consumer.close()
    return {"records": got, "bytes": nbytes, "seconds": elapsed, "rx_by_broker": received}


def _leader_and_racks(bootstrap: str, topic: str) -> tuple[int, list[int], dict[int, str]]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(topic, timeout=10)
    partition = md.topics[topic].partitions[0]
    nodes = admin.describe_cluster(request_timeout=10).result(10).nodes
    racks = {int(n.id): str(n.rack) for n in nodes}
    return int(partition.leader), [int(r) for r in partition.replicas], racks


def follower_rows(bootstrap: str, seconds: float, say: Say) -> list[Row]:
    """Rule 2: fill one RF=3 partition for ``seconds``, then read it back from the leader's
    rack and from a follower's rack."""
    size = 100
    topic = "zones-consume"
    create_topic(bootstrap, topic, 1, 3, min_isr=2)
    filled = summarise_produce(
        run_parallel(produce_worker, [(bootstrap, topic, size, seconds, "all", [0])]), size
    )
    expected = int(filled["records"])
    leader, replicas, racks = _leader_and_racks(bootstrap, topic)
    follower = next(r for r in replicas if r != leader)
    rows: list[Row] = []
    for who, broker in (("leader", leader), ("follower", follower)):
        rack = racks[broker]
        settle()
        (res,) = run_parallel(rack_catch_up_worker, [(bootstrap, topic, rack, expected, 300.0)])
        rx: dict[str, int] = res["rx_by_broker"]
        values = {
            "records": res["records"],
            "seconds": res["seconds"],
            "records_per_s": res["records"] / res["seconds"],
            "mb_per_s": res["bytes"] / res["seconds"] / MB,
            "record_bytes": size,
            "client_rack": rack,
            "leader": leader,
            "read_from": broker,
            "rx_bytes_by_broker": rx,
            "share_from_read_from": rx.get(str(broker), 0) / max(1, sum(rx.values())),
        }
        say(
            f"tidelog zones consume from the {who} (broker {broker}, rack {rack}): "
            f"{values['records']} records in {values['seconds']:.1f} s, "
            f"{values['records_per_s']:.0f} records/s, {values['mb_per_s']:.1f} MB/s; "
            f"bytes by broker {rx}"
        )
        rows.append(Row("zones", "tidelog", f"consume 1 partition 100 B from the {who}", values))
    return rows


def markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The report's "Quotas and follower reads" table, from the section's JSON rows."""
    if not rows:
        return []
    out = [
        "## Quotas and follower reads (`--only zones`)",
        "",
        "Three brokers on racks a, b, c with the rack-aware replica selector (KIP-392). "
        "Produce: 100-byte records, RF=3 acks=all over three partitions. Consume: one "
        "consumer's catch-up over one partition's backlog with `client.rack` set to the "
        "leader's rack or a follower's; \"share\" is the part of the bytes it received "
        "from the broker it was meant to read from (librdkafka's statistics).",
        "",
        "| row | records/s | MB/s | p99 ms | share |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        v = row["values"]
        p99 = v.get("latency_ms", {}).get("p99")
        share = v.get("share_from_read_from")
        out.append(
            f"| {row['workload']} | {v['records_per_s']:,.0f} | {v['mb_per_s']:.1f} | "
            f"{'' if p99 is None else f'{p99:.1f}'} | "
            f"{'' if share is None else f'{share:.0%}'} |"
        )
    return [*out, ""]


__all__ = ["markdown", "zone_rows"]
