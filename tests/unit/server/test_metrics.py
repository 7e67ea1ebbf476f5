"""The broker's metrics (tidelog.server.observability.metrics.broker_collector): names and
HELP, gauges computed at scrape time from broker state, counters bumped where things happen,
the config key, a broker serving its metrics."""

from __future__ import annotations

import asyncio
import struct
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.unit.server.metrics_fakes import (
    exchange,
    fake_node,
    fake_replica_manager,
    hosted,
    scrape,
    scrape_text,
    split,
)
from tests.unit.server.nodes import cluster_node
from tidelog.cli.main import main
from tidelog.client.records import Record, build_batch
from tidelog.controller.controller import Controller
from tidelog.errors import ConfigError, ErrorCode
from tidelog.model import NO_BROKER, BrokerId, ControllerEpoch, LeaderEpoch, TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.replication.partition import LeaderAndIsr
from tidelog.server.broker import Broker
from tidelog.server.cluster.backend import ZkBackend
from tidelog.server.cluster.fetcher import FetchState
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.config.values import MetricsListener
from tidelog.server.observability.metrics.broker_collector import (
    BrokerCollector,
    BrokerState,
    LazyFamily,
    LoopIdleProbe,
    PartitionCounts,
    broker_registry,
    count_partitions,
)
from tidelog.server.observability.metrics.endpoint import scrape_text as collect_then_format
from tidelog.server.observability.metrics.request_metrics import RequestMetrics
from tidelog.server.observability.metrics.zk_session import ZkSessionTracker, session_state
from tidelog.server.replica.manager import ReplicaManager, log_config_for, now_ms
from tidelog.server.replica.purgatory import DelayedOperation
from tidelog.server.replica.reads import PartitionRead
from tidelog.storage.log_manager import LogManager
from tidelog.zk import SessionEvent
from tidelog.zk.znodes import PartitionState, TopicAssignment


class Parked(DelayedOperation):
    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        pass


# --- the exposition ----------------------------------------------------------------------


def zk_backend(node: Any) -> ZkBackend:
    """The cluster side as a ZooKeeper broker's backend answers it, over a fake node."""
    node.metadata = None
    return ZkBackend(None, node)  # type: ignore[arg-type]


class Getters:
    """A cluster side whose controller candidate and ZooKeeper client a test sets later."""

    def __init__(self, controller: list[Any], zookeeper: list[Any]) -> None:
        self._controller, self._zookeeper = controller, zookeeper

    def controller(self) -> Any:
        return self._controller[0] if self._controller else None

    def is_active_controller(self) -> bool:
        controller = self.controller()
        return controller is not None and bool(controller.is_active)

    def fetchers(self) -> tuple[()]:
        return ()

    @property
    def zk(self) -> Any:
        return self._zookeeper[0] if self._zookeeper else None


def test_gauges_are_read_from_the_state_at_scrape_time() -> None:
    rm = fake_replica_manager()
    registry = broker_registry(rm, zk_backend(fake_node()), process=False)
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
    got = scrape(broker_registry(fake_replica_manager(), process=False))  # type: ignore[arg-type]
    assert got["kafka_controller_kafkacontroller_activecontrollercount"] == 1
    assert got["kafka_controller_kafkacontroller_offlinepartitionscount"] == 0
    assert not [k for k in got if "sessionexpirelistener" in k]


def test_an_inactive_controller_reports_zero_and_the_session_state_follows_zookeeper() -> None:
    tracker = ZkSessionTracker()
    node = fake_node(active=False, connected=False)
    registry = broker_registry(
        fake_replica_manager(),  # type: ignore[arg-type]
        zk_backend(node),
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
        zk_backend(fake_node()),
        requests=requests,
        zk_session=ZkSessionTracker(),
    )
    text = generate_latest(registry).decode()
    families = list(text_string_to_metric_families(text))
    ours = [f for f in families if not f.name.startswith("process_")]
    assert len(ours) == 51
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


def test_a_scrape_reads_the_state_when_collected_and_formats_it_later() -> None:
    """Package rule 4: ``scrape_text`` reads the partitions when called (on the loop); the
    call it returns formats only what was read, so it may run in a worker thread while the
    loop changes the partitions."""
    rm = fake_replica_manager()
    rm.partitions = {TopicPartition("t", 0): hosted(leader=True, isr={0}, log_end=120, size=10)}
    registry = broker_registry(rm, process=False)  # type: ignore[arg-type]
    format_later = collect_then_format(registry)
    # The loop moves on: the partition goes away before the text is formatted.
    rm.partitions = {}
    got = {
        sample.name + str(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(format_later().decode())
        for sample in family.samples
    }
    assert got["kafka_log_log_logendoffset[('partition', '0'), ('topic', 't')]"] == 120
    assert got["kafka_log_log_size[('partition', '0'), ('topic', 't')]"] == 10
    assert generate_latest(registry).count(b"kafka_log_log_size{") == 0


def test_a_lazy_family_builds_its_samples_once_when_first_read() -> None:
    calls: list[int] = []

    def build() -> list[Sample]:
        calls.append(1)
        return [Sample("x_y", {"a": "b"}, 1.0)]

    family = LazyFamily("x_y", "help", "gauge", build)
    assert calls == []
    assert [s.value for s in family.samples] == [1.0]
    assert [s.value for s in family.samples] == [1.0]
    assert calls == [1]


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
    rm.read([PartitionRead(tp, offset, 1 << 20)], 1 << 20, replica_id=replica_id)


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
    registry = broker_registry(rm, zk_backend(node), process=False)
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
    got = scrape(broker_registry(fake_replica_manager(), process=False))  # type: ignore[arg-type]
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


def test_partition_counts_are_taken_in_one_walk_over_the_hosted_partitions() -> None:
    rm = fake_replica_manager()
    # t-0 full ISR; t-1 under min ISR; t-2 at min ISR; u-0 followed, in /logs/b.
    got = count_partitions(rm.partitions.values(), {Path("/logs/b"): OSError("disk")})
    assert got == PartitionCounts(
        leaders=3, under_replicated=2, under_min_isr=1, at_min_isr=1, offline=1
    )
    assert count_partitions(rm.partitions.values(), {}).offline == 0
    assert count_partitions([], {}) == PartitionCounts()


def test_the_session_state_is_connected_expired_or_connecting() -> None:
    assert session_state(connected=True, tracker=None) == "CONNECTED"
    assert session_state(connected=False, tracker=None) == "CONNECTING"
    tracker = ZkSessionTracker()
    assert session_state(connected=False, tracker=tracker) == "CONNECTING"
    tracker(SessionEvent.EXPIRED, None)
    assert session_state(connected=False, tracker=tracker) == "EXPIRED"
    assert session_state(connected=True, tracker=tracker) == "CONNECTED"
    tracker(SessionEvent.REESTABLISHED, 7)
    assert session_state(connected=False, tracker=tracker) == "CONNECTING"


def test_the_collector_reads_what_its_getters_give_at_each_scrape() -> None:
    registry = CollectorRegistry(auto_describe=False)
    controller: list[Any] = []  # no candidate yet: not the active controller
    zookeeper: list[Any] = []
    registry.register(
        BrokerCollector(
            fake_replica_manager(),  # type: ignore[arg-type]
            cluster=Getters(controller, zookeeper),
        )
    )
    active = "kafka_controller_kafkacontroller_activecontrollercount"
    session = 'kafka_server_sessionexpirelistener_sessionstate{state="CONNECTED"}'
    got = scrape(registry)
    assert got[active] == 0
    assert session not in got
    node = fake_node()
    controller.append(node.controller)
    zookeeper.append(node.zk)
    got = scrape(registry)
    assert got[active] == 1
    assert got[session] == 1
    # Without a controller getter the broker is on its own: its own controller.
    alone = CollectorRegistry(auto_describe=False)
    alone.register(BrokerCollector(fake_replica_manager()))  # type: ignore[arg-type]
    assert scrape(alone)[active] == 1
