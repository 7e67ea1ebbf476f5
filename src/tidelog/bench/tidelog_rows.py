"""The tidelog rows: produce, catch-up, end-to-end latency, failover and scale.

Brokers are a :class:`~tidelog.bench.launch.Cluster` (ZooKeeper + three broker
processes on loopback), stopped by PID when the rows are done.
"""

# Optional dependencies (the bench extra) load lazily; workers take positional arguments
# because they run through multiprocessing's starmap.
# ruff: noqa: PLC0415, PLR0917

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelog.bench.common import MB, Row, cpu_seconds, rss_bytes, settle
from tidelog.bench.e2e import e2e_line, measure_e2e
from tidelog.bench.kafka import (
    catch_up_worker,
    perf_test_line,
    produce_worker,
    run_parallel,
    summarise_produce,
)
from tidelog.bench.launch import Cluster, ClusterFactory

Say = Callable[[str], None]

#: Broker settings of every benchmark cluster (besides the launcher's local defaults).
CLUSTER_OVERRIDES = {"min.insync.replicas": "2"}


def start_cluster(launch: ClusterFactory, directory: Path) -> Cluster:
    return launch(directory, brokers=3, overrides=CLUSTER_OVERRIDES).start(timeout_s=120)


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    rf: int,
    *,
    min_isr: int,
    timeout_s: float = 120,
    isr_size: int | None = None,
    config: dict[str, str] | None = None,
) -> tuple[float, float]:
    """Create a topic and wait until Metadata shows a leader and ``isr_size`` (default: a
    full ISR) in-sync replicas for every partition; returns (seconds until CreateTopics
    answered, seconds until all ready)."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = _admin(bootstrap)
    start = time.perf_counter()
    futures = admin.create_topics(
        [
            NewTopic(
                name,
                partitions,
                rf,
                config={"min.insync.replicas": str(min_isr), **(config or {})},
            )
        ],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    futures[name].result(timeout_s)
    answered = time.perf_counter() - start
    deadline = start + timeout_s
    while time.perf_counter() < deadline:
        if _all_ready(admin, name, partitions, isr_size or rf, frozenset()):
            return answered, time.perf_counter() - start
        time.sleep(0.1)
    raise RuntimeError(f"topic {name}: partitions not all led with a full ISR in {timeout_s}s")


def _all_ready(
    admin: Any, topic: str, partitions: int, isr_size: int, dead: frozenset[int]
) -> bool:
    return not_ready(admin, topic, partitions, isr_size, dead) is None


def not_ready(
    admin: Any, topic: str, partitions: int, isr_size: int, dead: frozenset[int]
) -> str | None:
    """Why Metadata does not yet show every partition led by a live broker with at least
    ``isr_size`` in-sync replicas (None when it does)."""
    try:
        md = admin.list_topics(topic, timeout=2)
    except Exception as exc:  # any failure means "not yet"
        return f"metadata: {exc}"
    t = md.topics.get(topic)
    if t is None or t.error is not None or len(t.partitions) != partitions:
        return f"topic: {None if t is None else (t.error, len(t.partitions))}"
    for p in t.partitions.values():
        if p.leader < 0 or p.leader in dead or len(p.isrs) < isr_size:
            return f"partition {p.id}: leader {p.leader} isr {p.isrs} error {p.error}"
    return None


@dataclass(frozen=True, slots=True)
class ProduceShape:
    """One kind of produce row: its label, replication, acks and partitions."""

    label: str
    rf: int
    acks: str
    min_isr: int
    partitions: int

    def topic(self, size: int) -> str:
        return f"produce-rf{self.rf}-p{self.partitions}-{size}"


#: The produce rows, in the order they run and show: the 3-partition rows (one leader per
#: broker), and the peers' shape beside them: one partition, so one leader takes every
#: write, as one NATS stream and one RabbitMQ stream do.
PRODUCE_SHAPES = (
    ProduceShape("RF=3 acks=all", 3, "all", 2, 3),
    ProduceShape("RF=3 acks=all 1 partition", 3, "all", 2, 1),
    ProduceShape("RF=1 acks=1", 1, "1", 1, 3),
)


def produce_rows(
    bootstrap: str,
    sizes: list[int],
    seconds: float,
    producers: int,
    say: Say,
    catch_up: bool,
) -> list[Row]:
    """A row per shape of ``PRODUCE_SHAPES`` and size; after each 3-partition RF=3 row,
    when ``catch_up``, a consumer's catch-up over the backlog it left."""
    rows: list[Row] = []
    for shape in PRODUCE_SHAPES:
        for size in sizes:
            row = _produce_row(bootstrap, shape, size, seconds, producers)
            rows.append(row)
            say(f"tidelog {shape.label} {size_label(size)}: {perf_test_line(row.values)}")
            records = row.values["records"]
            if catch_up and shape is PRODUCE_SHAPES[0] and records > 0:
                rows.append(_catch_up_row(bootstrap, shape, size, records, say))
    return rows


def _produce_row(
    bootstrap: str, shape: ProduceShape, size: int, seconds: float, producers: int
) -> Row:
    topic = shape.topic(size)
    partitions = list(range(shape.partitions))
    create_topic(bootstrap, topic, shape.partitions, shape.rf, min_isr=shape.min_isr)
    args = [(bootstrap, topic, size, seconds, shape.acks, partitions) for _ in range(producers)]
    settled = settle()
    values = summarise_produce(run_parallel(produce_worker, args), size)
    values.update(
        record_bytes=size, partitions=shape.partitions, producers=producers, settled=settled
    )
    note = f"min.insync.replicas={shape.min_isr}" if shape.rf > 1 else ""
    if shape.partitions == 1:
        note += "; one partition: one leader takes every write, as a peer's one stream"
    return Row("produce", "tidelog", f"{shape.label} {size_label(size)}", values, note=note)


def _catch_up_row(bootstrap: str, shape: ProduceShape, size: int, expected: int, say: Say) -> Row:
    (res,) = run_parallel(
        catch_up_worker,
        [(bootstrap, shape.topic(size), list(range(shape.partitions)), expected, 300.0)],
    )
    cv = {
        "records": res["records"],
        "seconds": res["seconds"],
        "records_per_s": res["records"] / res["seconds"],
        "mb_per_s": res["bytes"] / res["seconds"] / MB,
        "record_bytes": size,
    }
    say(
        f"tidelog catch-up {size_label(size)}: {cv['records']} records in "
        f"{cv['seconds']:.1f} s, {cv['records_per_s']:.0f} records/s, "
        f"{cv['mb_per_s']:.1f} MB/s"
    )
    return Row("catch-up", "tidelog", f"RF={shape.rf} backlog {size_label(size)}", cv)


#: ``--only compression``: the producers' codecs measured, beside an uncompressed baseline
#: carrying the same text records; then (producer codec, topic compression.type) pairs where
#: the broker recompresses every batch on append.
COMPRESSION_CODECS = ("none", "lz4", "zstd")
BROKER_RECOMPRESSION = (("none", "zstd"), ("none", "lz4"))


def compression_rows(
    bootstrap: str,
    cluster_dir: Path,
    sizes: list[int],
    seconds: float,
    producers: int,
    say: Say,
) -> list[Row]:
    """RF=3 acks=all produce rows (the shape of ``produce_rows``' RF=3 rows: 3 partitions,
    min.insync.replicas=2) with lz4 and zstd producers and an uncompressed baseline, all
    sending ``text_payloads`` records (random bytes do not compress). The broker validates
    every compressed batch (decompresses and walks its records, Kafka's LogValidator) and
    stores it as sent (compression.type=producer). ``stored_bytes_per_record``: the .log
    bytes of one replica per acknowledged record."""
    rows: list[Row] = []
    runs = [(codec, "producer") for codec in COMPRESSION_CODECS] + list(BROKER_RECOMPRESSION)
    for codec, topic_codec in runs:
        for size in sizes:
            recompress = topic_codec != "producer"
            topic = f"produce-{codec}-{topic_codec}-rf3-{size}"
            partitions = 3
            create_topic(
                bootstrap,
                topic,
                partitions,
                3,
                min_isr=2,
                config={"compression.type": topic_codec},
            )
            args = [
                (bootstrap, topic, size, seconds, "all", list(range(partitions)), codec, "text")
                for _ in range(producers)
            ]
            settled = settle()
            results = run_parallel(produce_worker, args)
            values = summarise_produce(results, size)
            stored = sum(p.stat().st_size for p in cluster_dir.rglob(f"{topic}-*/*.log"))
            values.update(
                record_bytes=size,
                partitions=partitions,
                producers=producers,
                settled=settled,
                compression=codec,
                topic_compression_type=topic_codec,
                stored_bytes_per_record=stored / 3 / values["records"]
                if values["records"]
                else None,
            )
            label = f"RF=3 acks=all {codec} {size_label(size)}"
            if recompress:
                label = (
                    f"RF=3 acks=all {codec}, broker recompresses to {topic_codec} "
                    f"{size_label(size)}"
                )
            rows.append(
                Row(
                    "compression",
                    "tidelog",
                    label,
                    values,
                    note="text records, min.insync.replicas=2",
                )
            )
            say(f"tidelog {label}: {perf_test_line(values)}")
    return rows


def e2e_rows(
    cluster: Cluster, rates: list[int], seconds: float, say: Say, prefix: str = "e2e"
) -> list[Row]:
    """Produce (acks=all, RF=3) at fixed rates; latency from send to a consumer's hands
    and the brokers' CPU per record (``bench.e2e``)."""
    rows: list[Row] = []
    bootstrap = cluster.bootstrap_servers
    pids = [b.pid for b in cluster.state.brokers if b.pid] if cluster.state else []
    for rate in rates:
        topic = f"{prefix}-{rate}"
        partitions = 3
        create_topic(bootstrap, topic, partitions, 3, min_isr=2)
        values = measure_e2e(
            {}, bootstrap, topic, range(partitions), rate=rate, seconds=seconds, broker_pids=pids
        )
        rows.append(
            Row(
                "e2e",
                "tidelog",
                f"RF=3 acks=all {rate} rec/s",
                values,
                note="100 B records, 3 partitions; first second dropped as warm-up",
            )
        )
        say(e2e_line("tidelog", rate, values))
    return rows


# --- failover and scale ---------------------------------------------------------------------


def _idle(cluster: Cluster, seconds: float, settle_s: float) -> dict[str, Any]:
    """CPU share and RSS of each broker over ``seconds`` of no client traffic, after
    ``settle_s`` for ISR changes and checkpoints after the topic creation to pass."""
    pids = {b.broker_id: b.pid for b in cluster.state.brokers if b.pid} if cluster.state else {}
    time.sleep(settle_s)
    before = {b: cpu_seconds(p) for b, p in pids.items()}
    time.sleep(seconds)
    cpu = {b: (cpu_seconds(p) - before[b]) / seconds for b, p in pids.items()}
    rss = {b: rss_bytes(p) for b, p in pids.items()}
    return {
        "idle_cpu_percent": {str(b): 100 * c for b, c in cpu.items()},
        "rss_mb": {str(b): r / MB for b, r in rss.items()},
        "idle_cpu_percent_max": 100 * max(cpu.values()),
        "rss_mb_max": max(rss.values()) / MB,
    }


def _leaders(admin: Any, topic: str) -> dict[int, int]:
    md = admin.list_topics(topic, timeout=2)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def _produce_to_each(bootstrap: str, topic: str, partitions: int, timeout_s: float) -> int:
    """One acks=all record to every partition; returns how many failed."""
    from confluent_kafka import Producer

    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 1,
            "message.timeout.ms": int(timeout_s * 1000),
            "on_delivery": on_delivery,
        }
    )
    for p in range(partitions):
        producer.produce(topic, b"failover", partition=p)
    remaining = producer.flush(timeout_s + 5)
    return len(failed) + remaining


def _failover(
    cluster: Cluster, topic: str, partitions: int, victim: int, crash: bool
) -> dict[str, Any]:
    """Kill (SIGKILL) or stop (SIGTERM) ``victim``; seconds until Metadata shows every
    partition led by a live broker, and until one acks=all produce to each succeeded."""
    bootstrap = ",".join(b.bootstrap for b in cluster.state.brokers if b.broker_id != victim)  # type: ignore[union-attr]
    admin = _admin(bootstrap)
    led_before = sum(1 for leader in _leaders(admin, topic).values() if leader == victim)
    info = cluster.broker(victim)
    assert info.pid is not None
    exited: list[float] = []
    start = time.perf_counter()
    if crash:
        os.kill(info.pid, signal.SIGKILL)
    else:
        os.kill(info.pid, signal.SIGTERM)

    def wait_exit() -> None:
        cluster.stop_broker(victim, timeout_s=60)  # reaps; SIGKILLs after 60 s only
        exited.append(time.perf_counter() - start)

    waiter = threading.Thread(target=wait_exit)
    waiter.start()
    dead = frozenset({victim})
    leaders_s = None
    reason: str | None = "not checked"
    deadline = start + 120
    while time.perf_counter() < deadline:
        reason = not_ready(admin, topic, partitions, 1, dead)
        if reason is None:
            leaders_s = time.perf_counter() - start
            break
        time.sleep(0.05)
    failed = _produce_to_each(bootstrap, topic, partitions, 60) if leaders_s else partitions
    produced_s = time.perf_counter() - start
    waiter.join(90)
    return {
        "victim": victim,
        "partitions_led_by_victim": led_before,
        "leaders_s": leaders_s,
        "all_produced_s": produced_s if failed == 0 else None,
        "failed_produces": failed,
        "process_exit_s": exited[0] if exited else None,
        "last_not_ready": reason,
    }


def failover_rows(
    launch: ClusterFactory,
    directory: Path,
    partitions: int,
    big: int,
    idle_s: float,
    say: Say,
    rows: list[Row],
) -> list[Row]:
    """Appends to ``rows`` as it goes, so what was measured survives a later failure."""
    cluster = start_cluster(launch, directory)
    try:
        _scale_rows(cluster, partitions, idle_s, say, rows)
        controller = cluster.controller_id()
        for crash in (True, False):
            _failover_round(cluster, partitions, controller, crash, say, rows)
        if big > partitions:
            _bigger_scale_rows(cluster, partitions, big, idle_s, say, rows)
    finally:
        cluster.stop()
    return rows


def _scale_rows(
    cluster: Cluster, partitions: int, idle_s: float, say: Say, rows: list[Row]
) -> None:
    """Create the ``failover`` topic, then measure the brokers idle with its replicas."""
    answered, ready = create_topic(
        cluster.bootstrap_servers, "failover", partitions, 3, min_isr=2, timeout_s=300
    )
    rows.append(
        Row(
            "scale",
            "tidelog",
            f"create {partitions} partitions RF=3",
            {"create_topics_answered_s": answered, "all_led_full_isr_s": ready},
        )
    )
    say(f"tidelog create {partitions} partitions: answered {answered:.2f} s, ready {ready:.2f} s")
    idle = _idle(cluster, idle_s, settle_s=idle_s)
    rows.append(Row("scale", "tidelog", f"{partitions} replicas per broker", idle))
    say(
        f"tidelog idle with {partitions} replicas/broker: CPU max "
        f"{idle['idle_cpu_percent_max']:.1f}%, RSS max {idle['rss_mb_max']:.0f} MB"
    )


def _failover_round(
    cluster: Cluster,
    partitions: int,
    controller: int | None,
    crash: bool,
    say: Say,
    rows: list[Row],
) -> None:
    """Kill (``crash``) or stop the non-controller broker leading the most partitions once
    every ISR is full, then start it again and time its partitions' return to full ISR."""
    session_ms = 6000
    candidates = [b.broker_id for b in cluster.state.brokers if b.broker_id != controller]  # type: ignore[union-attr]
    admin = _admin(cluster.bootstrap_servers)
    leaders = _leaders(admin, "failover")
    victim = max(candidates, key=lambda b: sum(1 for v in leaders.values() if v == b))
    # Kill only a healthy cluster: ISRs may still be settling (a follower slow to
    # start fetching 1,000 partitions is shrunk out after replica.lag.time.max.ms).
    settled = time.perf_counter()
    not_full = not_ready(admin, "failover", partitions, 3, frozenset())
    while not_full is not None and time.perf_counter() < settled + 120:
        time.sleep(0.5)
        not_full = not_ready(admin, "failover", partitions, 3, frozenset())
    waited = time.perf_counter() - settled
    result = _failover(cluster, "failover", partitions, victim, crash)
    result["full_isr_wait_before_s"] = waited
    result["full_isr_before"] = not_full is None
    if not_full is not None:
        result["not_full_isr_before"] = not_full
    kind = "SIGKILL" if crash else "SIGTERM (controlled shutdown)"
    result["zookeeper_session_timeout_s"] = session_ms / 1000
    rows.append(
        Row(
            "failover",
            "tidelog",
            f"{kind} of a broker, {partitions} partitions RF=3",
            result,
            note="victim is not the controller; zookeeper.session.timeout.ms=6000",
        )
    )
    say(f"tidelog failover {kind}: {result}")
    cluster.start_broker(victim, timeout_s=120)
    back = time.perf_counter()
    deadline = back + 90
    while time.perf_counter() < deadline:
        if _all_ready(admin, "failover", partitions, 3, frozenset()):
            result["restarted_full_isr_s"] = time.perf_counter() - back
            break
        time.sleep(0.5)
    else:
        result["restarted_full_isr_s"] = None
        result["after_restart"] = not_ready(admin, "failover", partitions, 3, frozenset())
    say(f"tidelog broker {victim} back: {result.get('restarted_full_isr_s')}")


def _bigger_scale_rows(
    cluster: Cluster, partitions: int, big: int, idle_s: float, say: Say, rows: list[Row]
) -> None:
    """Grow to ``big`` replicas per broker with a second topic and measure idle again."""
    more = big - partitions
    answered, ready = create_topic(
        cluster.bootstrap_servers, "scale", more, 3, min_isr=2, timeout_s=300, isr_size=1
    )
    rows.append(
        Row(
            "scale",
            "tidelog",
            f"create {more} more partitions RF=3",
            {"create_topics_answered_s": answered, "all_led_s": ready},
        )
    )
    idle = _idle(cluster, idle_s, settle_s=idle_s)
    rows.append(
        Row(
            "scale",
            "tidelog",
            f"{big} replicas per broker",
            idle,
            note="two brokers were restarted by the failover rows before this",
        )
    )
    say(
        f"tidelog idle with {big} replicas/broker: CPU max "
        f"{idle['idle_cpu_percent_max']:.1f}%, RSS max {idle['rss_mb_max']:.0f} MB"
    )


def size_label(size: int) -> str:
    """A record size as the rows name it: ``100 B``, ``64 KiB``."""
    if size >= 1024 and size % 1024 == 0:
        return f"{size // 1024} KiB"
    return f"{size} B"
