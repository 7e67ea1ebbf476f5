"""tidelog's demo (``make demo``): a replicated cluster survives losing a leader mid-stream.

1. Starts ZooKeeper and 3 brokers under ``./.tidelog`` (``tidelog.cli.launcher``).
2. Creates ``orders`` (6 partitions, replication factor 3, ``min.insync.replicas=2``).
3. Produces a known set of e-commerce order events with confluent-kafka, ``acks=all``,
   keeping its own record of which events the cluster acknowledged (a progress bar shows it).
4. Midway, SIGKILLs the broker leading partition 0 (the producer stalls until the
   controller moves leadership), and later restarts it (it catches up and rejoins the ISR).
5. Reads the topic back with confluent-kafka and checks every acknowledged event was read
   exactly once, with the bytes that were sent.
6. Prints a report (events, throughput, how long producers stalled, ISR changes seen through
   ``tidelog topics describe``'s machinery) and always tears the cluster down.
7. Keeps a timeline of the run (start, cluster up, topic created, producing, the leader
   killed, a new leader elected, the restart, ISR changes, the read back, end): printed at
   the end and written to ``<dir>/timeline.json``, and drawn over the acknowledgements per
   second as ``<dir>/timeline.png`` when matplotlib is installed (the bench extra).

The brokers serve their metrics (``metrics.listener`` on a free port, docs/metrics.md); the
demo prints each one's web console address, ``http://127.0.0.1:<port>/console``.

Exit status 0 when the verification passes, 1 when it fails, 2 when the cluster could not
be started. ``--events``, ``--dir``, ``--keep`` (leave the cluster running) adjust it.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import random
import re
import shutil
import signal
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from tidelog.cli.launcher import ClusterError, LocalCluster
from tidelog.cli.topics_describe import describe_topics
from tidelog.client import BlockingClient, ClientError, NewTopic
from tidelog.errors import ErrorCode
from tidelog.testing.zookeeper import ZooKeeperStartError

TOPIC = "orders"
PARTITIONS = 6
REPLICATION_FACTOR = 3
PRODUCTS = (
    ("book", 1299),
    ("headphones", 5999),
    ("kettle", 3450),
    ("lamp", 2400),
    ("mug", 899),
    ("backpack", 4599),
    ("sneakers", 8900),
    ("tea", 650),
)
STATUSES = ("created", "paid", "shipped", "delivered")


def generate_events(count: int, seed: int) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs: orders move created -> paid -> shipped -> delivered, keyed by
    order id so one order's events stay in one partition, in order."""
    rng = random.Random(seed)
    events: list[tuple[bytes, bytes]] = []
    open_orders: list[dict[str, Any]] = []
    order: dict[str, Any]
    next_order = 1
    base_ms = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    for event_id in range(count):
        if not open_orders or rng.random() < 0.35:
            product, price = rng.choice(PRODUCTS)
            order = {
                "order_id": f"o-{next_order:06d}",
                "customer": f"c-{rng.randrange(1, 400):04d}",
                "product": product,
                "quantity": rng.randint(1, 4),
                "unit_price_cents": price,
                "stage": 0,
            }
            next_order += 1
            open_orders.append(order)
        else:
            order = rng.choice(open_orders)
            order["stage"] += 1
        value = {
            "event_id": event_id,
            "order_id": order["order_id"],
            "status": STATUSES[order["stage"]],
            "customer": order["customer"],
            "product": order["product"],
            "quantity": order["quantity"],
            "amount_cents": order["quantity"] * order["unit_price_cents"],
            "event_time_ms": base_ms + event_id * 37,
        }
        if order["stage"] == len(STATUSES) - 1:
            open_orders.remove(order)
        events.append((order["order_id"].encode(), json.dumps(value, sort_keys=True).encode()))
    return events


def event_id_of(value: bytes) -> int:
    return int(json.loads(value)["event_id"])


# --- watching the cluster -------------------------------------------------------------------


@dataclass
class IsrWatcher:
    """Polls describe (Metadata + DescribeQuorum) once a second; records ISR/leader changes."""

    bootstrap: str
    started: float
    changes: list[str] = field(default_factory=list)
    #: (time.monotonic() of the poll, partition, ISR before, ISR after, leader before, leader
    #: after) of each change, for the timeline.
    events: list[tuple[float, int, tuple[int, ...], tuple[int, ...], int, int]] = field(
        default_factory=list
    )
    last: dict[int, tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    stop_event: threading.Event = field(default_factory=threading.Event)
    min_isr_seen: int = REPLICATION_FACTOR

    def poll_once(self, client: BlockingClient) -> None:
        try:
            topics, _notes = describe_topics(client, [TOPIC])
            states = [(p.partition, p.leader, p.isr) for p in topics[0].partitions]
        except ClientError:
            # A leader that was just killed does not answer DescribeQuorum: the Leader and
            # Isr columns come from Metadata anyway.
            md = client.metadata([TOPIC])
            states = [
                (p.partition, p.leader_id, p.isr) for p in md.topics[TOPIC].partitions.values()
            ]
        polled = time.monotonic()
        for partition, leader, isr in states:
            now = (leader, tuple(sorted(isr)))
            before = self.last.get(partition)
            self.min_isr_seen = min(self.min_isr_seen, len(isr))
            if before is not None and before != now:
                t = time.monotonic() - self.started
                moved = (
                    f"leader {before[0]} -> {now[0]}" if before[0] != now[0] else f"leader {now[0]}"
                )
                what = (
                    f"{TOPIC}-{partition}: ISR "
                    f"[{','.join(map(str, before[1]))}] -> [{','.join(map(str, now[1]))}], {moved}"
                )
                self.changes.append(f"t+{t:5.1f}s  {what}")
                self.events.append((polled, partition, before[1], now[1], before[0], now[0]))
            self.last[partition] = now

    def run(self) -> None:
        client: BlockingClient | None = None
        while not self.stop_event.is_set():
            try:
                if client is None:
                    client = BlockingClient(self.bootstrap, request_timeout_s=3.0)
                self.poll_once(client)
            except Exception:  # a watcher must not die: try again next second
                if client is not None:
                    client.close()
                client = None
            self.stop_event.wait(1.0)
        if client is not None:
            client.close()

    def all_in_sync(self) -> bool:
        return len(self.last) == PARTITIONS and all(
            len(isr) == REPLICATION_FACTOR for _, isr in self.last.values()
        )


# --- producing -------------------------------------------------------------------------------


@dataclass
class Deliveries:
    acked: dict[int, int] = field(default_factory=dict)  # event id -> partition
    failed: dict[int, str] = field(default_factory=dict)
    times: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def callback(self, err: KafkaError | None, msg: Message) -> None:
        event_id = event_id_of(msg.value() or b"{}")
        with self.lock:
            if err is not None:
                self.failed[event_id] = err.name()
            else:
                self.acked[event_id] = int(msg.partition() or 0)
                self.times.append(time.monotonic())


def progress_bar(done: int, total: int, width: int = 30) -> str:
    filled = int(width * done / total) if total else width
    return "[" + "#" * filled + "-" * (width - filled) + f"] {done}/{total}"


def leader_of(bootstrap: str, partition: int, topic: str = TOPIC) -> int:
    with BlockingClient(bootstrap) as client:
        md = client.metadata([topic])
    leader = md.topics[topic].partitions[partition].leader_id
    if leader < 0:
        raise RuntimeError(f"{topic}-{partition} has no leader")
    return leader


def create_topic(
    bootstrap: str, timeout_s: float = 60.0, *, topic: str = TOPIC, partitions: int = PARTITIONS
) -> None:
    with BlockingClient(bootstrap) as client:
        errors = client.create_topics(
            [
                NewTopic(
                    topic,
                    num_partitions=partitions,
                    replication_factor=REPLICATION_FACTOR,
                    configs={"min.insync.replicas": "2"},
                )
            ]
        )
        error = errors[topic]
        if error.error_code != ErrorCode.NONE:
            raise RuntimeError(f"cannot create {topic}: {error.error_code.name} {error.message}")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            md = client.metadata([topic])
            t = md.topics.get(topic)
            if (
                t is not None
                and len(t.partitions) == partitions
                and all(
                    p.leader_id >= 0 and len(p.isr) == REPLICATION_FACTOR
                    for p in t.partitions.values()
                )
            ):
                return
            time.sleep(0.2)
    raise RuntimeError(f"{topic} did not get leaders and full ISRs within {timeout_s:.0f}s")


def wait_leader_moved(bootstrap: str, topic: str, partition: int, victim: int) -> None:
    """Until the controller has moved ``topic-partition``'s leadership off ``victim`` (its
    ZooKeeper session has to expire first), at most 60s."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if leader_of(bootstrap, partition, topic) != victim:
                return
        except (ClientError, RuntimeError):
            pass  # no leader at this moment, or the broker asked was the dead one
        time.sleep(0.2)


class Chaos:
    """Kills partition 0's leader once ``kill_after`` events are acknowledged; restarts it
    ``restart_delay_s`` after the controller has moved its leadership (so the shrunken ISR
    is visible)."""

    def __init__(
        self,
        cluster: LocalCluster,
        deliveries: Deliveries,
        *,
        kill_after: int,
        restart_delay_s: float,
    ) -> None:
        self.cluster = cluster
        self.deliveries = deliveries
        self.kill_after = kill_after
        self.restart_delay_s = restart_delay_s
        self.report: dict[str, Any] = {}
        self.done = threading.Event()
        self.error: BaseException | None = None

    def _acked(self) -> int:
        with self.deliveries.lock:
            return len(self.deliveries.acked)

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            self.done.set()

    def _run(self) -> None:
        bootstrap = self.cluster.bootstrap_servers
        while self._acked() < self.kill_after:
            time.sleep(0.02)
        victim = leader_of(bootstrap, 0)
        self.report["victim"] = victim
        self.report["victim_partitions"] = victim_partitions(bootstrap, victim, TOPIC)
        self.report["acked_at_kill"] = self._acked()
        self.cluster.kill_broker(victim)
        kill_time = time.monotonic()
        self.report["kill_time"] = kill_time
        print(f"\n  SIGKILL broker {victim} (leader of {TOPIC}-0)", flush=True)
        # Wait for the controller to move leadership, so the shrunken ISRs are visible
        # before the broker returns.
        wait_leader_moved(bootstrap, TOPIC, 0, victim)
        self.report["leader_moved"] = time.monotonic()
        time.sleep(self.restart_delay_s)
        print(f"\n  restarting broker {victim}", flush=True)
        begin = time.monotonic()
        self.report["restart_begin"] = begin
        self.cluster.start_broker(victim)
        self.report["restart_seconds"] = time.monotonic() - begin


def produce(
    cluster: LocalCluster, events: list[tuple[bytes, bytes]], rate: float, report: dict[str, Any]
) -> Deliveries:
    """Produce every event at ``rate`` per second while ``Chaos`` kills and restarts a leader."""
    deliveries = Deliveries()
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120000,
            "retry.backoff.ms": 200,
            "topic.metadata.refresh.interval.ms": 1000,
            # Connection failures to the killed broker are expected: keep the output clean
            # (delivery errors still reach the callback and the report).
            "log_level": 2,
        }
    )
    total = len(events)
    chaos = Chaos(cluster, deliveries, kill_after=total * 2 // 5, restart_delay_s=3.0)
    chaos_thread = threading.Thread(target=chaos.run, daemon=True)
    chaos_thread.start()
    started = time.monotonic()
    last_draw = 0.0

    tty = sys.stdout.isatty()
    last_tenth = -1

    def draw(final: bool = False) -> None:
        nonlocal last_tenth
        with deliveries.lock:
            done = len(deliveries.acked)
        elapsed = time.monotonic() - started
        line = f"  {progress_bar(done, total)} acknowledged, {elapsed:5.1f}s"
        if tty:
            print("\r" + line, end="\n" if final else "", flush=True)
        elif done * 10 // total > last_tenth or final:
            # Not a terminal (CI, a log file): one line per tenth instead of redrawing.
            last_tenth = done * 10 // total
            print(line, flush=True)

    for i, (key, value) in enumerate(events):
        due = started + i / rate
        while (now := time.monotonic()) < due:
            producer.poll(min(0.05, due - now))
        while True:
            try:
                producer.produce(TOPIC, value=value, key=key, on_delivery=deliveries.callback)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if time.monotonic() - last_draw > 0.25:
            last_draw = time.monotonic()
            draw()
    deadline = time.monotonic() + 180
    while producer.flush(0.25) > 0 and time.monotonic() < deadline:
        draw()
    draw(final=True)
    report["produce_seconds"] = time.monotonic() - started
    chaos.done.wait(120)
    if chaos.error is not None:
        raise RuntimeError(f"killing/restarting the leader failed: {chaos.error}")
    report.update(chaos.report)
    kill_time = chaos.report.get("kill_time")
    if kill_time is not None:
        after = sorted(t for t in deliveries.times if t > kill_time)
        before = [t for t in deliveries.times if t <= kill_time]
        # The longest pause between acknowledgements from the kill on: the failover stall.
        points = [max(before) if before else kill_time, *after]
        gaps = [b - a for a, b in itertools.pairwise(points)]
        report["stall_seconds"] = max(gaps) if gaps else None
        report["first_ack_after_kill"] = (after[0] - kill_time) if after else None
    return deliveries


def victim_partitions(bootstrap: str, broker_id: int, topic: str) -> list[int]:
    with BlockingClient(bootstrap) as client:
        md = client.metadata([topic])
    return sorted(
        p.partition for p in md.topics[topic].partitions.values() if p.leader_id == broker_id
    )


# --- consuming and verifying -------------------------------------------------------------------


def consume_all(bootstrap: str, timeout_s: float = 120.0) -> tuple[list[bytes], float]:
    """Every record of the topic up to each partition's high watermark, via confluent-kafka."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tidelog-demo",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    started = time.monotonic()
    try:
        ends = {}
        for p in range(PARTITIONS):
            _low, high = consumer.get_watermark_offsets(
                KafkaTopicPartition(TOPIC, p), timeout=30, cached=False
            )
            ends[p] = high
        consumer.assign([KafkaTopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        positions = dict.fromkeys(range(PARTITIONS), 0)
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=5000, timeout=0.5):
                if msg.error() is not None:
                    error = msg.error()
                    if error is not None and error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(f"consume error: {error}")
                p = int(msg.partition() or 0)
                offset = int(msg.offset() or 0)
                if offset < ends[p]:
                    values.append(msg.value() or b"")
                positions[p] = max(positions[p], offset + 1)
        missing_tail = {p: (positions[p], ends[p]) for p in ends if positions[p] < ends[p]}
        if missing_tail:
            raise RuntimeError(f"could not read up to the high watermarks: {missing_tail}")
    finally:
        consumer.close()
    return values, time.monotonic() - started


def verify(
    events: list[tuple[bytes, bytes]], deliveries: Deliveries, values: list[bytes]
) -> list[str]:
    """Problems found (empty = every acknowledged event read exactly once, bytes intact)."""
    problems = []
    counts = Counter(event_id_of(v) for v in values)
    by_id = {event_id_of(v): v for v in values}
    missing = sorted(i for i in deliveries.acked if counts[i] == 0)
    duplicated = sorted(i for i in deliveries.acked if counts[i] > 1)
    unknown = sorted(i for i in counts if not 0 <= i < len(events))
    corrupted = sorted(i for i in deliveries.acked if counts[i] and by_id[i] != events[i][1])
    if missing:
        problems.append(f"{len(missing)} acknowledged events never read, e.g. {missing[:5]}")
    if duplicated:
        problems.append(
            f"{len(duplicated)} acknowledged events read twice, e.g. {duplicated[:5]} "
            "(a batch the killed leader had replicated but not acknowledged was retried by "
            "the producer; only a broker that de-duplicates idempotent producers' sequence "
            "numbers avoids this)"
        )
    if unknown:
        problems.append(f"{len(unknown)} records that were never produced, e.g. {unknown[:5]}")
    if corrupted:
        problems.append(f"{len(corrupted)} events read with different bytes, e.g. {corrupted[:5]}")
    return problems


# --- the Spark stage ---------------------------------------------------------------------------


SPARK_ORDERS_TOPIC = "spark-orders"
SPARK_REVENUE_TOPIC = "spark-revenue"
SPARK_PARTITIONS = 3


def progress_end(progress: dict[str, Any]) -> float:
    """When a micro-batch completed (epoch seconds), from its progress report."""
    start = datetime.datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00"))
    return start.timestamp() + progress.get("durationMs", {}).get("triggerExecution", 0) / 1000


class SparkChaos:
    """Runs inside ``run_pipeline`` (its ``during`` hook): once the Parquet query has
    processed a micro-batch with input, while the generator is still producing, SIGKILLs
    the broker leading ``spark-orders-0``; restarts it ``restart_delay_s`` after the
    controller moved that leadership."""

    def __init__(self, cluster: LocalCluster, restart_delay_s: float = 2.0) -> None:
        self.cluster = cluster
        self.restart_delay_s = restart_delay_s
        self.ack_log: list[tuple[float, int]] = []  # (monotonic, orders acknowledged)
        self.report: dict[str, Any] = {}
        self.queries: list[Any] = []

    def __call__(self, queries: list[Any], generator: threading.Thread) -> None:
        self.queries = queries
        bootstrap = self.cluster.bootstrap_servers
        deadline = time.monotonic() + 120
        while not any(p.get("numInputRows", 0) > 0 for p in queries[0].recentProgress):
            if queries[0].exception() is not None or time.monotonic() > deadline:
                raise RuntimeError("the streaming query processed no micro-batch with input")
            time.sleep(0.1)
        # On a loaded machine the first micro-batch can come after the generator finished:
        # the kill then lands while the query still runs, maybe caught up (reported).
        self.report["generator_alive_at_kill"] = generator.is_alive()
        victim = leader_of(bootstrap, 0, SPARK_ORDERS_TOPIC)
        self.report["victim"] = victim
        self.report["victim_partitions"] = victim_partitions(bootstrap, victim, SPARK_ORDERS_TOPIC)
        self.report["batches_before_kill"] = len(queries[0].recentProgress)
        self.report["acked_at_kill"] = self.ack_log[-1][1] if self.ack_log else 0
        self.cluster.kill_broker(victim)
        self.report["kill_time"] = time.monotonic()
        self.report["kill_wall"] = time.time()
        print(
            f"  SIGKILL broker {victim} (leader of {SPARK_ORDERS_TOPIC}-0) after "
            f"{self.report['batches_before_kill']} micro-batches, generator at "
            f"{self.report['acked_at_kill']} acknowledged orders"
            + ("" if self.report["generator_alive_at_kill"] else " (generator already done)"),
            flush=True,
        )
        wait_leader_moved(bootstrap, SPARK_ORDERS_TOPIC, 0, victim)
        self.report["leader_moved"] = time.monotonic()
        self.report["generator_alive_at_move"] = generator.is_alive()
        time.sleep(self.restart_delay_s)
        print(f"  restarting broker {victim}", flush=True)
        begin = time.monotonic()
        self.report["restart_begin"] = begin
        self.cluster.start_broker(victim)
        self.report["restart_seconds"] = time.monotonic() - begin

    def summarize(self) -> None:
        """Producer and query stalls around the kill (after the pipeline finished)."""
        kill_time = self.report.get("kill_time")
        if kill_time is None:
            return
        # The generator flushes (acks=all) every 200 orders: its longest pause between
        # acknowledged flushes from the kill on is the producer stall.
        times = [t for t, _ in self.ack_log]
        before = [t for t in times if t <= kill_time]
        after = [t for t in times if t > kill_time]
        points = [max(before) if before else kill_time, *after]
        gaps = [b - a for a, b in itertools.pairwise(points)]
        self.report["producer_stall"] = max(gaps) if gaps else None
        typical = [b - a for a, b in itertools.pairwise(before)]
        self.report["producer_typical"] = statistics.median(typical) if typical else None
        # The query: gaps between consecutive completed micro-batches.
        ends = (
            sorted(progress_end(p) for p in self.queries[0].recentProgress) if self.queries else []
        )
        kill_wall = self.report["kill_wall"]
        before_w = [e for e in ends if e <= kill_wall]
        after_w = [e for e in ends if e > kill_wall]
        points_w = [max(before_w) if before_w else kill_wall, *after_w]
        gaps_w = [b - a for a, b in itertools.pairwise(points_w)]
        self.report["query_stall"] = max(gaps_w) if gaps_w else None
        all_gaps = [b - a for a, b in itertools.pairwise(ends)]
        self.report["query_typical"] = statistics.median(all_gaps) if all_gaps else None
        self.report["query_batches"] = len(ends)
        self.report["first_batch_after_kill"] = (after_w[0] - kill_wall) if after_w else None


def run_spark_stage(
    cluster: LocalCluster, work_dir: Path, orders: int, rate: float
) -> tuple[dict[str, Any], SparkChaos]:
    """examples/orders_pipeline.py on this cluster: a Structured Streaming job computes
    revenue per category per minute from its own ``spark-orders`` topic into a topic and
    Parquet, verified against a direct computation (``report["ok"]``), while
    ``SparkChaos`` kills and restarts the leader of ``spark-orders-0``."""
    import orders_pipeline  # noqa: PLC0415 - examples/, next to this file
    from pyspark.sql import SparkSession  # noqa: PLC0415

    import tidelog.spark  # noqa: PLC0415

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tidelog-demo")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # keep the demo's output readable
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    tidelog.spark.register(spark)
    bootstrap = cluster.bootstrap_servers
    # Replicated like ``orders`` (so losing one broker loses no acknowledged order);
    # run_pipeline accepts topics that already exist.
    create_topic(bootstrap, topic=SPARK_ORDERS_TOPIC, partitions=SPARK_PARTITIONS)
    create_topic(bootstrap, topic=SPARK_REVENUE_TOPIC, partitions=1)
    chaos = SparkChaos(cluster)
    try:
        report: dict[str, Any] = orders_pipeline.run_pipeline(
            spark,
            bootstrap,
            orders_topic=SPARK_ORDERS_TOPIC,
            revenue_topic=SPARK_REVENUE_TOPIC,
            work_dir=work_dir,
            orders=orders,
            minutes=5,
            partitions=SPARK_PARTITIONS,
            timeout_s=300.0,
            rate=rate,
            ack_log=chaos.ack_log,
            during=chaos,
        )
        chaos.summarize()
    finally:
        spark.stop()
    return report, chaos


def spark_available() -> bool:
    try:
        import pyspark  # noqa: F401, PLC0415
    except ImportError:
        return False
    return (Path(__file__).parent / "orders_pipeline.py").exists()


# --- the console's address and the run's timeline --------------------------------------------

_METRICS_SERVED = re.compile(r"metrics served on (http://[^\s\"]+)/metrics")


def console_urls(cluster: LocalCluster, timeout_s: float = 10.0) -> dict[int, str]:
    """Each broker's web console (``<metrics listener>/console``), from the address it
    logged for its metrics endpoint (``metrics.listener`` port 0 picks a free one)."""
    state = cluster.state
    if state is None:
        return {}
    urls: dict[int, str] = {}
    deadline = time.monotonic() + timeout_s
    while len(urls) < len(state.brokers) and time.monotonic() < deadline:
        for info in state.brokers:
            try:
                found = _METRICS_SERVED.findall(info.output_path.read_text(errors="replace"))
            except OSError:
                found = []
            if found:
                urls[info.broker_id] = f"{found[-1]}/console"
        if len(urls) < len(state.brokers):
            time.sleep(0.1)
    return urls


def isr_changes(
    events: list[tuple[float, int, tuple[int, ...], tuple[int, ...], int, int]],
) -> list[tuple[float, str]]:
    """The watcher's changes, one line per poll that saw any: the ISR transitions (with
    the partitions of each) and the leaders that moved."""
    out = []
    for at in sorted({e[0] for e in events}):
        seen = [e for e in events if e[0] == at]
        isr: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = {}
        for _at, partition, before, after, _lb, _la in seen:
            if before != after:
                isr.setdefault((before, after), []).append(partition)
        parts = [
            f"{TOPIC}-{','.join(map(str, ps))}: ISR [{','.join(map(str, b))}] -> "
            f"[{','.join(map(str, a))}]"
            for (b, a), ps in isr.items()
        ]
        moved = [f"{TOPIC}-{p} {lb} -> {la}" for _at, p, _b, _a, lb, la in seen if lb != la]
        if moved:
            parts.append("leader " + ", ".join(moved))
        out.append((at, "; ".join(parts)))
    return out


@dataclass
class Timeline:
    """What happened when: (time.monotonic(), event, detail), reported from the start."""

    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)
    entries: list[tuple[float, str, str]] = field(default_factory=list)

    def mark(self, event: str, detail: str = "", at: float | None = None) -> None:
        self.entries.append((time.monotonic() if at is None else at, event, detail))

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for at, event, detail in sorted(self.entries, key=lambda e: e[0]):
            wall = self.started_wall + (at - self.started)
            out.append(
                {
                    "t_s": round(at - self.started, 3),
                    "time_utc": datetime.datetime.fromtimestamp(wall, datetime.UTC).isoformat(
                        timespec="milliseconds"
                    ),
                    "event": event,
                    "detail": detail,
                }
            )
        return out

    def print(self) -> None:
        print("timeline (t+ from the demo's start):")
        for row in self.rows():
            detail = f"  {row['detail']}" if row["detail"] else ""
            print(f"  t+{row['t_s']:6.1f}s  {row['event']}{detail}")

    def write(self, directory: Path, ack_times: list[float]) -> list[Path]:
        """``timeline.json`` and, with matplotlib, ``timeline.png`` (the events over the
        acknowledgements per second)."""
        directory.mkdir(parents=True, exist_ok=True)
        written = [directory / "timeline.json"]
        written[0].write_text(
            json.dumps({"events": self.rows()}, indent=1) + "\n", encoding="utf-8"
        )
        try:
            import matplotlib  # noqa: PLC0415 - the bench extra's, optional
        except ImportError:
            print("demo: matplotlib not installed: no timeline.png (pip install -e '.[bench]')")
            return written
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415

        rows = self.rows()
        acks = sorted(t - self.started for t in ack_times)
        fig, (events_ax, acks_ax) = plt.subplots(
            2,
            1,
            figsize=(11, 3 + 0.22 * len(rows) + 3.5),
            gridspec_kw={"height_ratios": [max(1.0, 0.22 * len(rows)), 3.5]},
        )
        # Top: every event of the run, one line each, in time order.
        for i, r in enumerate(rows):
            events_ax.plot([r["t_s"]], [-i], "o", markersize=4, color="tab:blue")
            events_ax.annotate(
                f"{r['event']} (t+{r['t_s']:.1f}s)",
                (r["t_s"], -i),
                fontsize=7,
                va="center",
                xytext=(5, 0),
                textcoords="offset points",
            )
        events_ax.set_yticks([])
        events_ax.set_ylim(-len(rows), 1)
        events_ax.set_xlim(0, max([r["t_s"] for r in rows] + [1.0]) * 1.25)
        events_ax.set_xlabel("seconds since the demo started")
        events_ax.set_title("tidelog demo: what happened when")
        # Bottom: the orders producer's acknowledgements per half second, with the events
        # of that stretch (the kill, the election, the restart) marked.
        if acks:
            lo, hi = max(0.0, acks[0] - 1.0), acks[-1] + 1.0
            width = 0.5
            counts = [0] * (int((hi - lo) / width) + 1)
            for t in acks:
                counts[int((t - lo) / width)] += 1
            xs = [lo + i * width for i in range(len(counts))]
            acks_ax.step(xs, [c / width for c in counts], where="post", linewidth=1)
            top = max(counts) / width
            marked = [r for r in rows if lo <= r["t_s"] <= hi]
            for i, r in enumerate(marked):
                acks_ax.axvline(r["t_s"], color="grey", linewidth=0.6, linestyle=":")
                acks_ax.annotate(
                    r["event"],
                    (r["t_s"], top * (0.95 - 0.09 * (i % 6))),
                    fontsize=7,
                    xytext=(2, 0),
                    textcoords="offset points",
                )
            acks_ax.set_xlim(lo, hi)
        acks_ax.set_xlabel("seconds since the demo started")
        acks_ax.set_ylabel("events acknowledged per second")
        acks_ax.set_title("orders: acks=all acknowledgements around the failover", fontsize=10)
        fig.tight_layout()
        fig.savefig(directory / "timeline.png", dpi=100)
        plt.close(fig)
        written.append(directory / "timeline.png")
        return written


# --- main ------------------------------------------------------------------------------------


def _secs(value: float | None) -> str:
    return f"{value:.1f}s" if value is not None else "?"


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--dir", type=Path, default=Path(".tidelog"))
    parser.add_argument("--events", type=int, default=30000)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--rate", type=float, default=3000.0, help="events per second")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    parser.add_argument(
        "--no-spark", action="store_true", help="skip the Spark pipeline stage at the end"
    )
    parser.add_argument("--spark-orders", type=int, default=5000)
    parser.add_argument(
        "--spark-rate", type=float, default=100.0, help="Spark stage orders per second"
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    run_started = time.monotonic()
    timeline = Timeline(started=run_started)
    timeline.mark("start", f"{args.events} events at up to {args.rate:.0f}/s")

    directory: Path = args.dir
    if (directory / "cluster.json").exists():
        existing = LocalCluster.attach(directory)
        if existing.is_running():
            print(
                f"demo: a cluster is already running in {directory}; stop it first with "
                f"`tidelog cluster down --dir {directory}`",
                file=sys.stderr,
            )
            return 2
    shutil.rmtree(directory, ignore_errors=True)  # a fresh cluster: no data from earlier runs

    events = generate_events(args.events, args.seed)
    # Every broker serves its metrics, and the web console beside them, on a free port.
    cluster = LocalCluster(
        directory, brokers=3, overrides={"metrics.listener": "http://127.0.0.1:0"}
    )
    report: dict[str, Any] = {}
    watcher: IsrWatcher | None = None
    watcher_thread: threading.Thread | None = None
    ok = False
    try:
        print(f"demo: starting ZooKeeper + 3 brokers under {directory} ...", flush=True)
        t0 = time.monotonic()
        try:
            cluster.start()
        except (ClusterError, ZooKeeperStartError) as exc:
            print(f"demo: cannot start the cluster: {exc}", file=sys.stderr)
            return 2
        print(f"  up in {time.monotonic() - t0:.1f}s: {cluster.bootstrap_servers}")
        timeline.mark("cluster up", cluster.bootstrap_servers)
        for broker_id, url in sorted(console_urls(cluster).items()):
            print(f"  console of broker {broker_id}: {url}")
        create_topic(cluster.bootstrap_servers)
        timeline.mark("topic created", f"{TOPIC}: {PARTITIONS} partitions, RF {REPLICATION_FACTOR}")
        print(
            f"  created {TOPIC}: {PARTITIONS} partitions, RF {REPLICATION_FACTOR}, "
            "min.insync.replicas=2"
        )
        watcher = IsrWatcher(cluster.bootstrap_servers, time.monotonic())
        with BlockingClient(cluster.bootstrap_servers) as client:
            watcher.poll_once(client)
        watcher.started = time.monotonic()
        watcher_thread = threading.Thread(target=watcher.run, daemon=True)
        watcher_thread.start()

        print(f"demo: producing {len(events)} order events (confluent-kafka, acks=all)")
        watcher.started = time.monotonic()
        report["t0"] = watcher.started
        timeline.mark("producing", "confluent-kafka, acks=all", at=watcher.started)
        deliveries = produce(cluster, events, args.rate, report)
        timeline.mark("produced", f"{len(deliveries.acked)} acknowledged")
        if "kill_time" in report:
            timeline.mark(
                "failover injected",
                f"SIGKILL broker {report['victim']} (leader of {TOPIC}-0)",
                at=report["kill_time"],
            )
        if "leader_moved" in report:
            timeline.mark("leader elected", f"{TOPIC}-0 led elsewhere", at=report["leader_moved"])
        if "restart_begin" in report:
            timeline.mark(
                "broker restarted",
                f"broker {report['victim']} serving after {report['restart_seconds']:.1f}s",
                at=report["restart_begin"] + report["restart_seconds"],
            )

        # The restarted broker catches up and rejoins every ISR.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not watcher.all_in_sync():
            time.sleep(0.5)
        report["isr_restored"] = watcher.all_in_sync()
        for at, what in isr_changes(watcher.events):
            timeline.mark("ISR change", what, at=at)
        if report["isr_restored"]:
            timeline.mark("ISRs full again", f"all {PARTITIONS} partitions")

        print("demo: consuming everything back (confluent-kafka) ...")
        values, consume_seconds = consume_all(cluster.bootstrap_servers)
        timeline.mark("read back", f"{len(values)} records")
        problems = verify(events, deliveries, values)
        ok = not problems

        spark_report: dict[str, Any] | None = None
        spark_chaos: SparkChaos | None = None
        if args.no_spark:
            pass
        elif not spark_available():
            print("demo: pyspark not installed: skipping the Spark stage (make venv installs it)")
        else:
            print(
                f"demo: Spark: streaming revenue per category per minute over "
                f"{args.spark_orders} more orders (examples/orders_pipeline.py), killing a "
                "leader while the query runs ..."
            )
            spark_started = time.monotonic()
            timeline.mark("spark stage", f"{args.spark_orders} orders")
            spark_report, spark_chaos = run_spark_stage(
                cluster, directory / "spark", args.spark_orders, args.spark_rate
            )
            spark_report["wall_seconds"] = time.monotonic() - spark_started
            r = spark_chaos.report
            if "kill_time" in r:
                timeline.mark(
                    "spark: failover injected", f"SIGKILL broker {r['victim']}", at=r["kill_time"]
                )
            if "leader_moved" in r:
                timeline.mark("spark: leader elected", at=r["leader_moved"])
            timeline.mark("spark stage done", "verified" if spark_report["ok"] else "NOT verified")
            if not spark_report["ok"]:
                problems.append(f"the Spark pipeline's output did not verify: {spark_report}")
                ok = False

        # -- report --
        acked = len(deliveries.acked)
        print()
        print("=== tidelog demo report ===")
        print(f"events generated        {len(events)}")
        print(f"acknowledged (acks=all) {acked}")
        print(f"failed deliveries       {len(deliveries.failed)}")
        print(
            f"produce                 {report['produce_seconds']:.1f}s at up to {args.rate:.0f} "
            f"events/s offered; {acked / report['produce_seconds']:.0f} events/s acknowledged "
            "(including the failover)"
        )
        print(
            f"consume                 {len(values)} records in {consume_seconds:.1f}s, "
            f"{len(values) / max(consume_seconds, 1e-9):.0f} records/s"
        )
        if "victim" in report:
            print(
                f"failover                t+{report['kill_time'] - report['t0']:.1f}s SIGKILLed "
                f"broker {report['victim']} (leader of partitions {report['victim_partitions']})"
            )
            stall = report.get("stall_seconds")
            first = report.get("first_ack_after_kill")
            print(
                "                        producers stalled "
                + (f"{stall:.1f}s" if stall is not None else "?")
                + " at most; first ack after the kill "
                + (f"{first:.1f}s" if first is not None else "never")
            )
            if "restart_seconds" in report:
                print(
                    f"                        t+{report['restart_begin'] - report['t0']:.1f}s "
                    f"restarted broker {report['victim']} (serving after "
                    f"{report['restart_seconds']:.1f}s); ISRs full again: "
                    f"{'yes' if report['isr_restored'] else 'no'}"
                )
        print(f"ISR changes seen via describe ({len(watcher.changes)}, t+ from the first event):")
        for line in watcher.changes:
            print(f"  {line}")
        if spark_report is not None:
            print(
                f"spark pipeline          {spark_report['orders_generated']} orders -> "
                f"{spark_report['windows_parquet']} windows in Parquet (expected "
                f"{spark_report['windows_expected']}), topic output "
                f"{'matches' if spark_report['topic_matches'] else 'DIFFERS'}; "
                f"{spark_report['wall_seconds']:.0f}s with Spark's start-up: "
                f"{'verified' if spark_report['ok'] else 'NOT verified'}"
            )
        if spark_chaos is not None and "kill_time" in spark_chaos.report:
            r = spark_chaos.report
            print(
                f"spark failover          t+{r['kill_time'] - spark_started:.1f}s into the stage "
                f"SIGKILLed broker {r['victim']} (leader of {SPARK_ORDERS_TOPIC} partitions "
                f"{r['victim_partitions']}) after {r['batches_before_kill']} micro-batches, "
                f"generator at {r['acked_at_kill']}/{args.spark_orders} orders"
            )
            print(
                "                        generator (acks=all) stalled "
                + _secs(r.get("producer_stall"))
                + " at most (typical gap between acknowledged flushes "
                + _secs(r.get("producer_typical"))
                + ")"
            )
            print(
                "                        query stalled "
                + _secs(r.get("query_stall"))
                + " at most between completed micro-batches (typical "
                + _secs(r.get("query_typical"))
                + f", {r.get('query_batches')} batches); first batch after the kill "
                + _secs(r.get("first_batch_after_kill"))
            )
            print(
                f"                        t+{r['restart_begin'] - spark_started:.1f}s restarted "
                f"broker {r['victim']} (serving after {r['restart_seconds']:.1f}s)"
            )
        if ok:
            print(
                f"verification            PASSED: all {acked} acknowledged events read exactly once"
                + (" and the Spark output matches" if spark_report is not None else "")
            )
        else:
            print("verification            FAILED:")
            for problem in problems:
                print(f"  - {problem}")
        timeline.mark("end", "verification " + ("passed" if ok else "FAILED"))
        timeline.print()
        for path in timeline.write(directory, deliveries.times):
            print(f"timeline written        {path}")
        print(f"total run time          {time.monotonic() - run_started:.1f}s")
    except KeyboardInterrupt:
        print("\ndemo: interrupted", file=sys.stderr)
        ok = False
    except Exception as exc:  # report, then tear down
        print(f"\ndemo: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        for name, path in cluster.logs() if cluster.state else ():
            print(f"  log of {name}: {path}", file=sys.stderr)
        ok = False
    finally:
        if watcher is not None:
            watcher.stop_event.set()
        if watcher_thread is not None:
            watcher_thread.join(5)
        if not args.keep:
            print("demo: tearing the cluster down", flush=True)
            cluster.stop(timeout_s=15)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
