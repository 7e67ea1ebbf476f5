"""Prometheus metrics (tidelog.server.observability.metrics): names and HELP, gauges computed at
scrape
time from broker state, request counters, the HTTP endpoint, the config key."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.server.nodes import cluster_node
from tidelog.cli.main import main
from tidelog.client.records import Record, build_batch
from tidelog.controller.controller import Controller
from tidelog.controller.zk import SessionEvent
from tidelog.controller.znodes import PartitionState, TopicAssignment
from tidelog.errors import ConfigError, ErrorCode
from tidelog.histogram import Histogram
from tidelog.model import NO_BROKER, BrokerId, ControllerEpoch, LeaderEpoch, TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.replication.partition import LeaderAndIsr
from tidelog.security.principal import ANONYMOUS
from tidelog.server.broker import Broker
from tidelog.server.cluster.node import FetchState
from tidelog.server.config.broker_config import MetricsListener, load_broker_config
from tidelog.server.network.dispatcher import Dispatcher
from tidelog.server.network.request_context import RequestContext
from tidelog.server.observability.metrics import (
    CONTENT_TYPE,
    BrokerState,
    BrokerTopicStats,
    LoopIdleProbe,
    MetricsEndpoint,
    RequestMetrics,
    RequestTiming,
    ZkSessionTracker,
    broker_registry,
    request_name,
)
from tidelog.server.replica.manager import (
    FetchRequestPartition,
    ReplicaManager,
    effective_topic_config,
    log_config_for,
    now_ms,
)
from tidelog.server.replica.purgatory import DelayedOperation, Purgatory
from tidelog.server.replica.quota import ReplicationQuotas
from tidelog.storage.log_manager import LogManager

# --- fake broker state -------------------------------------------------------------------


def hosted(
    *,
    leader: bool,
    isr: set[int],
    replicas: tuple[int, ...] = (0, 1, 2),
    min_isr: int = 2,
    log_dir: str = "/logs/a",
    log_end: int = 0,
    log_start: int = 0,
    size: int = 0,
    segments: tuple[int, ...] = (0,),
) -> SimpleNamespace:
    partition = SimpleNamespace(
        is_leader=leader,
        isr=frozenset(BrokerId(b) for b in isr),
        replicas=tuple(BrokerId(b) for b in replicas),
        min_insync_replicas=min_isr,
    )
    the_log = SimpleNamespace(
        directory=Path(log_dir) / "t-0",
        log_end_offset=log_end,
        log_start_offset=log_start,
        size_bytes=size,
        segment_base_offsets=segments,
    )
    return SimpleNamespace(partition=partition, log=the_log)


def fake_replica_manager() -> SimpleNamespace:
    return SimpleNamespace(
        partitions={
            TopicPartition("t", 0): hosted(leader=True, isr={0, 1, 2}),
            TopicPartition("t", 1): hosted(leader=True, isr={0}),  # under min ISR
            TopicPartition("t", 2): hosted(leader=True, isr={0, 1}),  # at min ISR
            TopicPartition("u", 0): hosted(leader=False, isr={1, 2}, log_dir="/logs/b"),
        },
        offline_log_dirs={},
        produce_purgatory=Purgatory("Produce"),
        fetch_purgatory=Purgatory("Fetch"),
        isr_shrinks=4,
        isr_expands=3,
        failed_isr_updates=1,
        replication_quotas=ReplicationQuotas(0),
        topic_stats=BrokerTopicStats(),
    )


def election_times(*ms: float) -> Histogram:
    """A controller's LeaderElectionRateAndTimeMs timer after rounds of ``ms``."""
    timer = Histogram()
    for value in ms:
        timer.observe(value)
    return timer


def fake_node(*, active: bool = True, connected: bool = True) -> SimpleNamespace:
    controller = SimpleNamespace(
        is_active=active,
        offline_partition_count=lambda: 2 if active else 0,
        preferred_replica_imbalance_count=lambda: 1 if active else 0,
        global_counts=lambda: (5, 17) if active else (0, 0),
        leader_elections=9,
        unclean_leader_elections=1,
        election_times=election_times(3.0, 40.0),
    )
    return SimpleNamespace(
        controller=controller,
        zk=SimpleNamespace(connected=connected),
        fetchers=SimpleNamespace(fetchers={}),
    )


def scrape_text(text: bytes) -> dict[str, float]:
    """Every sample as ``name{label="v",...}`` -> value (labels sorted)."""
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text.decode()):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            samples[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return samples


def scrape(registry: Any) -> dict[str, float]:
    return scrape_text(generate_latest(registry))


class Parked(DelayedOperation):
    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        pass


# --- the exposition ----------------------------------------------------------------------


def test_gauges_are_read_from_the_state_at_scrape_time() -> None:
    rm = fake_replica_manager()
    registry = broker_registry(rm, fake_node(), process=False)  # type: ignore[arg-type]
    got = scrape(registry)
    assert got["kafka_server_replicamanager_partitioncount"] == 4
    assert got["kafka_server_replicamanager_leadercount"] == 3
    assert got["kafka_server_replicamanager_underreplicatedpartitions"] == 2
    assert got["kafka_server_replicamanager_underminisrpartitioncount"] == 1
    assert got["kafka_server_replicamanager_atminisrpartitioncount"] == 1
    assert got["kafka_server_replicamanager_offlinereplicacount"] == 0
    assert got["kafka_log_logmanager_offlinelogdirectorycount"] == 0
    assert got["kafka_server_replicamanager_isrshrinks_total"] == 4
    assert got["kafka_server_replicamanager_isrexpands_total"] == 3
    assert got["kafka_server_replicamanager_failedisrupdates_total"] == 1
    assert got["kafka_controller_kafkacontroller_activecontrollercount"] == 1
    assert got["kafka_controller_kafkacontroller_offlinepartitionscount"] == 2
    assert got["kafka_controller_kafkacontroller_preferredreplicaimbalancecount"] == 1
    assert got["kafka_controller_kafkacontroller_globaltopiccount"] == 5
    assert got["kafka_controller_kafkacontroller_globalpartitioncount"] == 17
    assert got["kafka_controller_controllerstats_leaderelections_total"] == 9
    assert got["kafka_controller_controllerstats_uncleanleaderelections_total"] == 1
    timer = "kafka_controller_controllerstats_leaderelectionrateandtimems"
    assert got[timer + "_count"] == 2
    assert got[timer + "_sum"] == 43.0
    assert got["kafka_server_kafkaserver_brokerstate"] == BrokerState.RUNNING
    assert (
        got[
            'kafka_server_delayedoperationpurgatory_numdelayedoperations{delayedoperation="Produce"}'
        ]
        == 0
    )
    assert got['kafka_server_sessionexpirelistener_sessionstate{state="CONNECTED"}'] == 1
    assert got['kafka_server_sessionexpirelistener_sessionstate{state="CONNECTING"}'] == 0

    # The state changes; the next scrape shows it, with nothing told to the metrics.
    rm.partitions[TopicPartition("t", 1)].partition.isr = frozenset({0, 1, 2})
    rm.partitions[TopicPartition("t", 0)].partition.is_leader = False
    rm.offline_log_dirs[Path("/logs/b")] = OSError(28, "No space left on device")
    rm.isr_expands += 1
    again = scrape(registry)
    assert again["kafka_server_replicamanager_leadercount"] == 2
    assert again["kafka_server_replicamanager_underreplicatedpartitions"] == 1
    assert again["kafka_server_replicamanager_underminisrpartitioncount"] == 0
    assert again["kafka_server_replicamanager_offlinereplicacount"] == 1
    assert again["kafka_log_logmanager_offlinelogdirectorycount"] == 1
    assert again["kafka_server_replicamanager_isrexpands_total"] == 4


def test_purgatory_sizes_count_parked_operations() -> None:
    async def body() -> dict[str, float]:
        rm = fake_replica_manager()
        op = Parked(30_000)
        rm.produce_purgatory.try_complete_else_watch(op, [TopicPartition("t", 0)])
        rm.produce_purgatory.try_complete_else_watch(Parked(30_000), [TopicPartition("t", 1)])
        got = scrape(broker_registry(rm, process=False))  # type: ignore[arg-type]
        rm.produce_purgatory.complete_all()
        return got

    got = asyncio.run(body())
    key = 'kafka_server_delayedoperationpurgatory_{}{{delayedoperation="{}"}}'
    assert got[key.format("numdelayedoperations", "Produce")] == 2
    assert got[key.format("purgatorysize", "Produce")] == 2
    assert got[key.format("numdelayedoperations", "Fetch")] == 0


def test_a_broker_alone_is_its_own_controller_and_has_no_zookeeper_metrics() -> None:
    got = scrape(broker_registry(fake_replica_manager(), None, process=False))  # type: ignore[arg-type]
    assert got["kafka_controller_kafkacontroller_activecontrollercount"] == 1
    assert got["kafka_controller_kafkacontroller_offlinepartitionscount"] == 0
    assert not [k for k in got if "sessionexpirelistener" in k]


def test_an_inactive_controller_reports_zero_and_the_session_state_follows_zookeeper() -> None:
    tracker = ZkSessionTracker()
    node = fake_node(active=False, connected=False)
    registry = broker_registry(
        fake_replica_manager(),  # type: ignore[arg-type]
        node,  # type: ignore[arg-type]
        zk_session=tracker,
        state=lambda: BrokerState.STARTING,
        process=False,
    )
    got = scrape(registry)
    assert got["kafka_controller_kafkacontroller_activecontrollercount"] == 0
    assert got["kafka_controller_kafkacontroller_offlinepartitionscount"] == 0
    assert got["kafka_server_kafkaserver_brokerstate"] == BrokerState.STARTING
    assert got['kafka_server_sessionexpirelistener_sessionstate{state="CONNECTING"}'] == 1
    tracker(SessionEvent.SUSPENDED, None)
    tracker(SessionEvent.EXPIRED, None)
    got = scrape(registry)
    assert got['kafka_server_sessionexpirelistener_sessionstate{state="EXPIRED"}'] == 1
    assert got['kafka_server_sessionexpirelistener_sessionstate{state="CONNECTING"}'] == 0
    assert got["kafka_server_sessionexpirelistener_zookeeperexpires_total"] == 1
    assert got["kafka_server_sessionexpirelistener_zookeeperdisconnects_total"] == 1
    tracker(SessionEvent.REESTABLISHED, 42)
    node.zk.connected = True
    got = scrape(registry)
    assert got['kafka_server_sessionexpirelistener_sessionstate{state="CONNECTED"}'] == 1
    assert got['kafka_server_sessionexpirelistener_sessionstate{state="EXPIRED"}'] == 0


def test_every_metric_has_help_naming_its_kafka_mbean_and_a_kafka_style_name() -> None:
    requests = RequestMetrics([ApiKey.PRODUCE, ApiKey.FETCH])
    registry = broker_registry(
        fake_replica_manager(),  # type: ignore[arg-type]
        fake_node(),  # type: ignore[arg-type]
        requests=requests,
        zk_session=ZkSessionTracker(),
    )
    text = generate_latest(registry).decode()
    families = list(text_string_to_metric_families(text))
    ours = [f for f in families if not f.name.startswith("process_")]
    assert len(ours) == 49
    listed = (Path(__file__).parents[3] / "docs" / "metrics.md").read_text()
    for family in ours:
        assert family.name.startswith("kafka_"), family.name
        assert family.name == family.name.lower()
        assert "(kafka." in family.documentation, family.name
        assert f"`{family.name}" in listed, f"{family.name} is not in docs/metrics.md"
    assert any(f.name.startswith("process_") for f in families)  # ProcessCollector
    assert "# TYPE kafka_network_requestmetrics_totaltimems histogram" in text
    assert "# TYPE kafka_network_requestmetrics_requests_total counter" in text
    assert (
        "# HELP kafka_server_replicamanager_underreplicatedpartitions Partitions led here "
        "whose ISR is smaller than their replica set "
        "(kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions)"
    ) in text


def test_request_names_are_kafkas() -> None:
    assert request_name(ApiKey.PRODUCE) == "Produce"
    assert request_name(ApiKey.LIST_OFFSETS) == "ListOffsets"
    assert request_name(ApiKey.LEADER_AND_ISR) == "LeaderAndIsr"
    assert request_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert request_name(ApiKey.API_VERSIONS) == "ApiVersions"
    assert request_name(9999) == "9999"


def test_requests_are_counted_when_answered_and_fetches_split_by_side() -> None:
    async def body() -> tuple[dict[str, float], dict[str, float]]:
        requests = RequestMetrics([ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA])
        registry = broker_registry(
            fake_replica_manager(),  # type: ignore[arg-type]
            requests=requests,
            process=False,
        )
        timings: dict[int, Any] = {}

        def answer(api_key: ApiKey, body: object, result: object) -> RequestTiming | None:
            timing = requests.start(api_key, body, time.monotonic())
            if timing is not None:
                RequestMetrics.dispatched(timing, result, timings)
            return timing

        answers = [object(), object()]
        for result in answers:
            answer(ApiKey.PRODUCE, None, result)
        parked: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        answer(ApiKey.PRODUCE, None, parked)  # acks=all: not yet
        answer(ApiKey.PRODUCE, None, None)  # acks=0: no answer, done at once
        consumer, follower = object(), object()
        answer(ApiKey.FETCH, SimpleNamespace(replica_id=-1), consumer)
        answer(ApiKey.FETCH, SimpleNamespace(replica_state=SimpleNamespace(replica_id=2)), follower)
        assert answer(ApiKey.CREATE_TOPICS, None, object()) is None  # not served: ignored
        before = scrape(registry)
        # The connection writes the answers: each is counted then.
        for result in (*answers, consumer, follower):
            timings.pop(id(result)).sent(time.monotonic())
        parked.set_result(None)
        await asyncio.sleep(0)
        timings.pop(id(parked)).sent(time.monotonic())
        assert timings == {}
        return before, scrape(registry)

    before, after = asyncio.run(body())
    total = 'kafka_network_requestmetrics_requests_total{{request="{}"}}'
    assert before[total.format("Produce")] == 1  # only the acks=0 one
    assert before[total.format("Fetch")] == 0
    assert after[total.format("Produce")] == 4
    assert after[total.format("Fetch")] == 2
    assert after[total.format("FetchConsumer")] == 1
    assert after[total.format("FetchFollower")] == 1
    assert after[total.format("Metadata")] == 0
    assert not [k for k in after if "CreateTopics" in k]
    for split in (
        "totaltimems",
        "requestqueuetimems",
        "localtimems",
        "remotetimems",
        "responsequeuetimems",
        "responsesendtimems",
    ):
        name = f"kafka_network_requestmetrics_{split}"
        assert after[f'{name}_count{{request="Produce"}}'] == 4, split
        assert after[f'{name}_bucket{{le="+Inf",request="Produce"}}'] == 4, split
        assert after[f'{name}_sum{{request="Produce"}}'] >= 0, split
        # Histograms only for requests seen.
        assert f'{name}_count{{request="Metadata"}}' not in after, split


def test_the_time_split_adds_up_to_the_total() -> None:
    """Marks 0, 2, 5, 105, 106, 109 ms: queue 2, local 3, remote 100 (parked), response
    queue 1, send 3, total 109."""
    requests = RequestMetrics([ApiKey.PRODUCE])
    stats = requests.stats("Produce")
    assert stats is not None
    stats.record(10.0, 10.002, 10.005, 10.105, 10.106, 10.109)
    expected = {
        "totaltimems": 109.0,
        "requestqueuetimems": 2.0,
        "localtimems": 3.0,
        "remotetimems": 100.0,
        "responsequeuetimems": 1.0,
        "responsesendtimems": 3.0,
    }
    for split, ms in expected.items():
        histogram = stats.histogram(split)
        assert histogram.count == 1, split
        assert histogram.sum_ms == pytest.approx(ms, abs=1e-6), split
    got = scrape(broker_registry(fake_replica_manager(), requests=requests, process=False))  # type: ignore[arg-type]
    remote = "kafka_network_requestmetrics_remotetimems_bucket"
    assert got[f'{remote}{{le="50.0",request="Produce"}}'] == 0
    assert got[f'{remote}{{le="250.0",request="Produce"}}'] == 1
    local = "kafka_network_requestmetrics_localtimems_bucket"
    assert got[f'{local}{{le="2.5",request="Produce"}}'] == 0
    assert got[f'{local}{{le="5.0",request="Produce"}}'] == 1


def test_the_dispatcher_marks_what_it_dispatches() -> None:
    requests = RequestMetrics([ApiKey.API_VERSIONS])
    handled: list[int] = []

    def handler(header: Any, _body: Any) -> None:
        handled.append(header.correlation_id)
        time.sleep(0.02)  # local time
        # acks=0 style: no answer

    apis = SimpleNamespace(handlers={ApiKey.API_VERSIONS: handler})
    dispatcher = Dispatcher(
        apis,  # type: ignore[arg-type]
        {ApiKey.API_VERSIONS: (0, 3)},
        request_metrics=requests,
    )
    client_id = b"test"
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 7, len(client_id)) + client_id
    conn = SimpleNamespace(
        peer="127.0.0.1:1",
        authenticator=None,
        request_context=RequestContext(ANONYMOUS, "127.0.0.1", "PLAINTEXT", "PLAINTEXT"),
        last_active=time.monotonic() - 0.05,  # received 50 ms ago
        timings={},
    )
    assert dispatcher.dispatch(conn, frame) is None  # type: ignore[arg-type]
    assert handled == [7]
    stats = requests.stats("ApiVersions")
    assert stats is not None
    assert stats.count == 1
    assert stats.histogram("requestqueuetimems").sum_ms >= 50.0
    assert 20.0 <= stats.histogram("localtimems").sum_ms < 1000.0
    assert stats.histogram("remotetimems").sum_ms == 0.0
    assert stats.histogram("totaltimems").sum_ms >= 70.0
    assert conn.timings == {}  # nothing left to write


# --- the HTTP endpoint -------------------------------------------------------------------


async def exchange(port: int, request: bytes, *, eof: bool = False) -> bytes:
    """Send ``request`` (and close our side if ``eof``); everything the endpoint answers
    until it closes (it must)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    if eof:
        writer.write_eof()
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 5.0)  # EOF: the endpoint closed
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def with_endpoint(test: Callable[[int], Awaitable[None]]) -> None:
    async def body() -> None:
        registry = broker_registry(fake_replica_manager(), process=False)  # type: ignore[arg-type]
        endpoint = MetricsEndpoint(registry)
        port = await endpoint.start(MetricsListener("127.0.0.1", 0))
        assert port > 0
        try:
            await test(port)
        finally:
            await endpoint.stop()

    asyncio.run(body())


def split(answer: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode("ascii").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, headers, body


def test_get_metrics_answers_200_in_the_text_format() -> None:
    async def test(port: int) -> None:
        answer = await exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, body = split(answer)
        assert status == "HTTP/1.1 200 OK"
        assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert headers["content-type"] == CONTENT_TYPE
        assert headers["connection"] == "close"
        assert int(headers["content-length"]) == len(body)
        assert b"\nkafka_server_replicamanager_leadercount 3.0\n" in body
        # A query string (Prometheus sends none, but a browser might) is fine; HEAD too.
        status, _, _ = split(await exchange(port, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"))
        assert status == "HTTP/1.1 200 OK"
        status, headers, body = split(await exchange(port, b"HEAD /metrics HTTP/1.1\r\n\r\n"))
        assert status == "HTTP/1.1 200 OK"
        assert body == b""
        assert int(headers["content-length"]) > 0

    with_endpoint(test)


def test_other_paths_are_404_and_other_methods_405() -> None:
    async def test(port: int) -> None:
        status, _, body = split(await exchange(port, b"GET / HTTP/1.1\r\n\r\n"))
        assert status == "HTTP/1.1 404 Not Found"
        assert b"/metrics" in body
        status, _, _ = split(await exchange(port, b"GET /metricsx HTTP/1.1\r\n\r\n"))
        assert status == "HTTP/1.1 404 Not Found"
        status, headers, _ = split(await exchange(port, b"POST /metrics HTTP/1.1\r\n\r\n"))
        assert status == "HTTP/1.1 405 Method Not Allowed"
        assert headers["allow"] == "GET, HEAD"

    with_endpoint(test)


def test_bad_input_is_answered_400_and_the_connection_closed() -> None:
    async def test(port: int) -> None:
        # Garbage for a request line (here a TLS ClientHello's start): 400, then EOF,
        # without waiting for any header.
        answer = await exchange(port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n")
        status, headers, _ = split(answer)
        assert status == "HTTP/1.1 400 Bad Request"
        assert headers["connection"] == "close"
        # Not HTTP/1.x, or too many words.
        for line in (b"GET /metrics\r\n", b"GET /metrics SPDY/3\r\n", b"GET / x HTTP/1.1\r\n"):
            status, _, _ = split(await exchange(port, line))
            assert status == "HTTP/1.1 400 Bad Request", line
        # A line longer than the limit, and more behind it: still answered, not reset.
        long_line = b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n"
        status, _, _ = split(await exchange(port, long_line))
        assert status == "HTTP/1.1 400 Bad Request"
        # A line cut short by the client's end is bad input too.
        status, _, _ = split(await exchange(port, b"GET /met", eof=True))
        assert status == "HTTP/1.1 400 Bad Request"
        # A client that sends nothing and closes its side gets nothing.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 5.0) == b""
        writer.close()

    with_endpoint(test)


def test_a_client_that_goes_away_mid_request_leaves_the_endpoint_serving() -> None:
    async def test(port: int) -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # no blank line
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        status, _, _ = split(await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n"))
        assert status == "HTTP/1.1 200 OK"

    with_endpoint(test)


# --- the config key ----------------------------------------------------------------------

BASE = {"log.dirs": "/tmp/x"}


def test_metrics_listener_is_off_by_default() -> None:
    config = load_broker_config(BASE)
    assert config.get_str("metrics.listener") == ""
    assert config.metrics_listener is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("http://127.0.0.1:9404", MetricsListener("127.0.0.1", 9404)),
        ("http://0.0.0.0:0", MetricsListener("0.0.0.0", 0)),
        (" http://broker-1.example:9404/ ", MetricsListener("broker-1.example", 9404)),
        ("http://[::1]:9404", MetricsListener("::1", 9404)),
        ("", None),
    ],
)
def test_metrics_listener_values(value: str, expected: MetricsListener | None) -> None:
    config = load_broker_config({**BASE, "metrics.listener": value})
    assert config.metrics_listener == expected
    if expected is not None:
        assert config.get_str("metrics.listener") == str(expected)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("127.0.0.1:9404", "expected http://host:port (the path is always /metrics), or empty"),
        ("https://127.0.0.1:9404", "expected http://host:port"),
        ("http://127.0.0.1", "expected http://host:port"),
        ("http://:9404", "expected http://host:port"),
        ("http://127.0.0.1:9404/prom", "expected http://host:port"),
        ("http://127.0.0.1:99999", "port 99999 must be between 0 and 65535"),
    ],
)
def test_a_bad_metrics_listener_names_the_key(value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_broker_config({**BASE, "metrics.listener": value})
    assert info.value.key == "metrics.listener"
    assert str(info.value).startswith(f"metrics.listener: invalid value {value!r}: {problem}")


# --- a broker on its own, in this process ----------------------------------------------


def test_a_broker_serves_its_metrics_and_counts_its_requests(tmp_path: Path) -> None:
    async def body() -> None:
        config = load_broker_config(
            {
                "log.dirs": str(tmp_path / "logs"),
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "metrics.listener": "http://127.0.0.1:0",
            }
        )
        broker = Broker(config)
        await broker.start()
        try:
            assert broker.metrics_endpoint is not None
            port = broker.metrics_endpoint.bound_port
            _, _, text = split(await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n"))
            got = scrape_text(text)
            assert got["kafka_server_kafkaserver_brokerstate"] == BrokerState.RUNNING
            assert got["kafka_server_replicamanager_partitioncount"] == 0
            assert got["kafka_controller_kafkacontroller_activecontrollercount"] == 1
            name = 'kafka_network_requestmetrics_requests_total{request="ApiVersions"}'
            assert got[name] == 0
            # One ApiVersions v0 request over the Kafka listener.
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.bound_port)
            request = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 1, 1) + b"t"
            writer.write(struct.pack(">i", len(request)) + request)
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            await reader.readexactly(size)
            writer.close()
            _, _, text = split(await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n"))
            got = scrape_text(text)
            assert got[name] == 1
            # Timed from its arrival to its answer written, by the connection.
            for split_name in ("totaltimems", "requestqueuetimems", "responsesendtimems"):
                count = f'kafka_network_requestmetrics_{split_name}_count{{request="ApiVersions"}}'
                assert got[count] == 1, split_name
            assert not [k for k in got if 'request="Produce"' in k and "_count" in k]
            assert 0.0 <= got["kafka_network_socketserver_networkprocessoravgidlepercent"] <= 1.0
        finally:
            await broker.stop()
        assert broker.state is BrokerState.SHUTTING_DOWN

    asyncio.run(body())


def test_without_the_key_a_broker_has_no_endpoint_and_counts_nothing(tmp_path: Path) -> None:
    async def body() -> None:
        config = load_broker_config(
            {"log.dirs": str(tmp_path / "logs"), "listeners": "PLAINTEXT://127.0.0.1:0"}
        )
        broker = Broker(config)
        await broker.start()
        try:
            assert broker.metrics_endpoint is None
            assert broker.request_metrics is None
        finally:
            await broker.stop()

    asyncio.run(body())


# --- counted where it happens ------------------------------------------------------------


def test_committed_isr_changes_are_counted_and_refusals_are_failures(tmp_path: Path) -> None:
    """``ClusterNode._alter_partition`` counts a committed shrink, and an AlterPartition
    answered with an error as a failed ISR update that changes nothing."""

    async def body() -> None:
        node = cluster_node(tmp_path, replica_lag_time_max_ms="1000")
        rm = node.replica_manager
        tp = TopicPartition("t", 0)
        hosted = rm.make_leader(
            tp,
            uuid.uuid4(),
            effective_topic_config(node.config, {}),
            leader_epoch=4,
            partition_epoch=9,
            replicas=[BrokerId(1), BrokerId(2), BrokerId(3)],
            isr=[BrokerId(1), BrokerId(2), BrokerId(3)],
        )
        partition = hosted.partition
        answers: list[tuple[ErrorCode, LeaderAndIsr | None]] = []

        async def send_alter(_proposal: object) -> tuple[ErrorCode, LeaderAndIsr | None]:
            return answers.pop(0)

        node._send_alter = send_alter  # type: ignore[method-assign]
        # Refused (not applied): the change is dropped, nothing shrank.
        proposal = partition.maybe_shrink_isr(now_ms() + 10_000)
        assert proposal is not None
        assert proposal.new_isr == (1,)
        answers.append((ErrorCode.INVALID_REQUEST, None))
        await node._alter_partition(proposal)
        assert partition.isr == {1, 2, 3}
        assert (rm.isr_shrinks, rm.isr_expands, rm.failed_isr_updates) == (0, 0, 1)
        # Committed.
        proposal = partition.maybe_shrink_isr(now_ms() + 10_000)
        assert proposal is not None
        answers.append(
            (ErrorCode.NONE, LeaderAndIsr(leader=1, leader_epoch=4, isr=(1,), partition_epoch=10))
        )
        await node._alter_partition(proposal)
        assert partition.isr == {1}
        assert (rm.isr_shrinks, rm.isr_expands, rm.failed_isr_updates) == (1, 0, 1)
        got = scrape(broker_registry(rm, process=False))
        assert got["kafka_server_replicamanager_isrshrinks_total"] == 1
        assert got["kafka_server_replicamanager_failedisrupdates_total"] == 1
        assert got["kafka_server_replicamanager_underreplicatedpartitions"] == 1
        assert got["kafka_server_replicamanager_underminisrpartitioncount"] == 0  # min ISR 1
        rm.log_manager.close()

    asyncio.run(body())


def test_isr_change_counts() -> None:
    rm = SimpleNamespace(isr_shrinks=0, isr_expands=0)

    def count(before: set[int], after: set[int]) -> tuple[int, int]:
        ReplicaManager.count_isr_change(
            rm,  # type: ignore[arg-type]
            frozenset(BrokerId(b) for b in before),
            frozenset(BrokerId(b) for b in after),
        )
        return rm.isr_shrinks, rm.isr_expands

    assert count({1, 2, 3}, {1, 2, 3}) == (0, 0)
    assert count({1, 2, 3}, {1, 2}) == (1, 0)
    assert count({1, 2}, {1, 2, 3}) == (1, 1)
    assert count({1, 2}, {1, 3}) == (2, 2)  # one out, one in: both


def test_the_controller_counts_elections_and_unclean_ones() -> None:
    controller = Controller(None, BrokerId(1), None)  # type: ignore[arg-type]

    def s(leader: int, epoch: int, *isr: int) -> PartitionState:
        return PartitionState(
            leader=BrokerId(leader),
            leader_epoch=LeaderEpoch(epoch),
            isr=tuple(BrokerId(b) for b in isr),
            controller_epoch=ControllerEpoch(1),
        )

    controller._count_election(s(1, 3, 1, 2), s(1, 3, 1))  # a follower left the ISR
    assert (controller.leader_elections, controller.unclean_leader_elections) == (0, 0)
    controller._count_election(s(1, 3, 1, 2), s(2, 4, 2))  # clean: 2 was in the ISR
    assert (controller.leader_elections, controller.unclean_leader_elections) == (1, 0)
    controller._count_election(s(2, 4, 2), s(NO_BROKER, 5, 2))  # offline: no leader
    assert (controller.leader_elections, controller.unclean_leader_elections) == (1, 0)
    controller._count_election(s(NO_BROKER, 5, 2), s(3, 6, 3))  # unclean: 3 was not
    assert (controller.leader_elections, controller.unclean_leader_elections) == (2, 1)
    # Inactive: the gauges that need the controller's state are 0.
    assert controller.offline_partition_count() == 0
    assert controller.preferred_replica_imbalance_count() == 0
    assert controller.global_counts() == (0, 0)
    # Active (its seat and cache set by hand here).
    controller._seat = object()  # type: ignore[assignment]
    replicas = (BrokerId(1), BrokerId(2), BrokerId(3))
    for topic in ("t", "gone"):
        controller._assignments[topic] = TopicAssignment(
            partitions={0: replicas, 1: replicas[1:] + replicas[:1]}, topic_id=None
        )
    controller._states[TopicPartition("t", 0)] = s(2, 1, 2, 3)  # not its first replica
    controller._states[TopicPartition("t", 1)] = s(NO_BROKER, 1, 1)  # offline
    controller._states[TopicPartition("gone", 0)] = s(NO_BROKER, 1, 1)
    controller._states[TopicPartition("gone", 1)] = s(3, 1, 3)
    controller._deleting.add("gone")  # a topic being deleted counts for neither
    assert controller.offline_partition_count() == 1
    assert controller.preferred_replica_imbalance_count() == 2  # t-0 and offline t-1
    assert controller.global_counts() == (2, 4)


def test_a_taken_metrics_port_stops_start_up_naming_the_key(tmp_path: Path) -> None:
    async def body() -> None:
        taken = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
        port = taken.sockets[0].getsockname()[1]
        config = load_broker_config(
            {
                "log.dirs": str(tmp_path / "logs"),
                "listeners": "PLAINTEXT://127.0.0.1:0",
                "metrics.listener": f"http://127.0.0.1:{port}",
            }
        )
        broker = Broker(config)
        try:
            with pytest.raises(OSError, match=rf"metrics.listener http://127.0.0.1:{port}: "):
                await broker.start()
        finally:
            await broker.stop()
            taken.close()
            await taken.wait_closed()

    asyncio.run(body())


def test_a_bad_metrics_listener_stops_broker_start_up_with_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text(f"broker.id=1\nlog.dirs={tmp_path / 'logs'}\n")
    code = main(
        ["broker", "--config", str(properties), "--override", "metrics.listener=localhost:9404"]
    )
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "tidelog broker: invalid configuration: metrics.listener: invalid value "
        "'localhost:9404': expected http://host:port (the path is always /metrics), or empty"
    )
    assert not (tmp_path / "logs").exists()


# --- per partition and per topic ---------------------------------------------------------


def test_log_gauges_per_hosted_partition() -> None:
    rm = fake_replica_manager()
    rm.partitions = {
        TopicPartition("t", 0): hosted(
            leader=True, isr={0, 1, 2}, log_end=120, log_start=20, size=4096, segments=(0, 50, 100)
        ),
        TopicPartition("u", 3): hosted(leader=False, isr={1, 2}, log_end=7, size=300),
    }
    got = scrape(broker_registry(rm, process=False))  # type: ignore[arg-type]
    t0, u3 = 'partition="0",topic="t"', 'partition="3",topic="u"'
    assert got[f"kafka_log_log_size{{{t0}}}"] == 4096
    assert got[f"kafka_log_log_numlogsegments{{{t0}}}"] == 3
    assert got[f"kafka_log_log_logendoffset{{{t0}}}"] == 120
    assert got[f"kafka_log_log_logstartoffset{{{t0}}}"] == 20
    assert got[f"kafka_log_log_size{{{u3}}}"] == 300
    assert got[f"kafka_log_log_logendoffset{{{u3}}}"] == 7
    assert got[f"kafka_log_log_numlogsegments{{{u3}}}"] == 1
    # A partition no longer hosted has no series at the next scrape.
    del rm.partitions[TopicPartition("u", 3)]
    again = scrape(broker_registry(rm, process=False))  # type: ignore[arg-type]
    assert f"kafka_log_log_size{{{u3}}}" not in again
    assert again[f"kafka_log_log_size{{{t0}}}"] == 4096


def rm_with_partitions(tmp_path: Path) -> ReplicaManager:
    config = load_broker_config({"log.dirs": str(tmp_path), "message.max.bytes": "2000"})
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    rm = ReplicaManager(config, logs)
    topic_config = effective_topic_config(config, {})
    for tp in (TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)):
        rm.make_leader(tp, uuid.uuid4(), topic_config)
    follower = TopicPartition("f", 0)
    rm.make_follower(
        follower,
        uuid.uuid4(),
        topic_config,
        leader=BrokerId(2),
        leader_epoch=1,
        partition_epoch=1,
        replicas=[BrokerId(0), BrokerId(2)],
        isr=[BrokerId(0), BrokerId(2)],
    )
    return rm


def read_now(rm: ReplicaManager, tp: TopicPartition, offset: int, replica_id: int = -1) -> None:
    rm.read([FetchRequestPartition(tp, offset, 1 << 20)], 1 << 20, replica_id=replica_id)


def test_topic_counters_count_appends_and_reads_where_they_happen(tmp_path: Path) -> None:
    rm = rm_with_partitions(tmp_path)
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    three = build_batch([Record(value=b"x" * 10) for _ in range(3)], base_timestamp_ms=1)
    one = build_batch([Record(value=b"y")], base_timestamp_ms=1)
    too_large = build_batch([Record(value=b"z" * 3000)], base_timestamp_ms=1)
    appended = rm.append_records({a0: three, a1: one, b0: one}, acks=1)
    assert {r.error for r, _ in appended.values()} == {ErrorCode.NONE}
    # Refused: too large (bytes rejected), and a partition followed here (not leader).
    refused = rm.append_records({b0: too_large, TopicPartition("f", 0): one}, acks=1)
    assert refused[b0][0].error == ErrorCode.MESSAGE_TOO_LARGE
    assert refused[TopicPartition("f", 0)][0].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # Not hosted at all: no series for a name a client made up.
    rm.append_records({TopicPartition("nope", 0): one}, acks=1)
    read_now(rm, a0, 0)  # a consumer reads the 3 records (the HW is at the end: no ISR)
    read_now(rm, a0, 0, replica_id=2)  # a follower too
    read_now(rm, b0, 99)  # offset out of range: a failed fetch
    got = scrape(broker_registry(rm, process=False))
    c = 'kafka_server_brokertopicmetrics_{}_total{{topic="{}"}}'
    assert got[c.format("bytesin", "a")] == len(three) + len(one)
    assert got[c.format("bytesin", "b")] == len(one)
    assert got[c.format("messagesin", "a")] == 4
    assert got[c.format("messagesin", "b")] == 1
    assert got[c.format("totalproducerequests", "b")] == 2
    assert got[c.format("failedproducerequests", "b")] == 1
    assert got[c.format("bytesrejected", "b")] == len(too_large)
    assert got[c.format("failedproducerequests", "f")] == 1
    assert got[c.format("failedproducerequests", "a")] == 0
    assert got[c.format("bytesout", "a")] == len(three)  # the consumer's read only
    assert got[c.format("totalfetchrequests", "a")] == 2
    assert got[c.format("failedfetchrequests", "b")] == 1
    assert got[c.format("bytesout", "b")] == 0
    assert not [k for k in got if 'topic="nope"' in k]
    # The all-topics series: no topic label.
    assert got["kafka_server_brokertopicmetrics_bytesin_total"] == len(three) + 2 * len(one)
    assert got["kafka_server_brokertopicmetrics_messagesin_total"] == 5
    assert got["kafka_server_brokertopicmetrics_replicationbytesout_total"] == len(three)
    assert not [
        k for k in got if k.startswith("kafka_server_brokertopicmetrics_replicationbytesout_total{")
    ]
    assert got["kafka_server_brokertopicmetrics_failedproducerequests_total"] == 2
    # Topic b goes: its series go, the totals keep its counts.
    rm.delete_partitions([b0])
    got = scrape(broker_registry(rm, process=False))
    assert c.format("bytesin", "b") not in got
    assert got["kafka_server_brokertopicmetrics_bytesin_total"] == len(three) + 2 * len(one)
    assert got["kafka_server_brokertopicmetrics_bytesrejected_total"] == len(too_large)
    assert got[c.format("bytesin", "a")] == len(three) + len(one)
    rm.log_manager.close()


def test_follower_lag_is_the_leaders_high_watermark_minus_our_log_end() -> None:
    rm = fake_replica_manager()
    node = fake_node()
    # Partitions t-0..2 are led elsewhere; u-0 is followed from broker 1 (hosted() above:
    # log end 0 unless given).
    rm.partitions[TopicPartition("u", 0)] = hosted(leader=False, isr={1, 2}, log_end=40)
    rm.partitions[TopicPartition("u", 1)] = hosted(leader=False, isr={1, 2}, log_end=75)
    rm.partitions[TopicPartition("v", 0)] = hosted(leader=False, isr={2}, log_end=5)
    from_1 = SimpleNamespace(
        leader_id=1,
        partitions={
            TopicPartition("u", 0): FetchState(leader_epoch=3, leader_high_watermark=100),
            TopicPartition("u", 1): FetchState(leader_epoch=3, leader_high_watermark=70),
        },
    )
    from_2 = SimpleNamespace(
        leader_id=2,
        partitions={TopicPartition("v", 0): FetchState(leader_epoch=1)},  # not fetched yet
    )
    node.fetchers.fetchers = {1: from_1, 2: from_2}
    registry = broker_registry(rm, node, process=False)  # type: ignore[arg-type]
    got = scrape(registry)
    lag = (
        "kafka_server_fetcherlagmetrics_consumerlag"
        '{{clientid="ReplicaFetcherThread-0-{}",partition="{}",topic="{}"}}'
    )
    assert got[lag.format(1, 0, "u")] == 60
    assert got[lag.format(1, 1, "u")] == 0  # ahead of the HW it last saw: not behind
    assert lag.format(2, 0, "v") not in got
    assert got['kafka_server_replicafetchermanager_maxlag{clientid="Replica"}'] == 60
    # Caught up: the next fetch answer brings the HW we reached.
    rm.partitions[TopicPartition("u", 0)].log.log_end_offset = 100
    got = scrape(registry)
    assert got[lag.format(1, 0, "u")] == 0
    assert got['kafka_server_replicafetchermanager_maxlag{clientid="Replica"}'] == 0


def test_a_broker_alone_has_no_fetcher_lag() -> None:
    got = scrape(broker_registry(fake_replica_manager(), None, process=False))  # type: ignore[arg-type]
    assert got['kafka_server_replicafetchermanager_maxlag{clientid="Replica"}'] == 0
    assert not [k for k in got if k.startswith("kafka_server_fetcherlagmetrics_consumerlag")]


def test_loop_idle_is_the_share_of_wall_time_off_the_cpu() -> None:
    clock = [100.0]
    cpu = [5.0]
    probe = LoopIdleProbe(cpu=lambda: cpu[0], clock=lambda: clock[0])
    assert probe.sample() == 1.0  # no window yet
    clock[0] += 2.0
    cpu[0] += 0.5  # busy 25 % of 2 s
    assert probe.sample() == pytest.approx(0.75)
    clock[0] += 0.1  # too short a window: the previous value
    cpu[0] += 0.1
    assert probe.sample() == pytest.approx(0.75)
    clock[0] += 0.9  # 1 s since the last window, 1 s busy: none idle
    cpu[0] += 0.9
    assert probe.sample() == pytest.approx(0.0)
    clock[0] += 1.0
    assert probe.sample() == pytest.approx(1.0)
    # Through the collector: a gauge between 0 and 1.
    got = scrape(broker_registry(fake_replica_manager(), process=False))  # type: ignore[arg-type]
    idle = got["kafka_network_socketserver_networkprocessoravgidlepercent"]
    assert 0.0 <= idle <= 1.0
