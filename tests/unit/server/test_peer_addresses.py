"""``tidelog.testing.peer.addresses`` (testing only): where this broker reaches a peer instead
of the peer's registered address. Parsed and validated at start-up (a bad value names the key
and the entry), and used by every broker -> broker connection: the controller's channel, the
follower fetcher, requests to the controller."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from tidelog.aio import cancel_and_wait
from tidelog.cli.main import main
from tidelog.errors import ConfigError
from tidelog.model import BrokerId, ControllerEpoch, TopicPartition
from tidelog.protocol import control
from tidelog.server.cluster.controller_channel import RpcControllerSender
from tidelog.server.cluster.metadata_cache import CachedBroker, ClusterMetadataCache
from tidelog.server.cluster.node import ClusterNode
from tidelog.server.config.broker_config import BrokerConfig, load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.replica.manager import ReplicaManager, log_config_for
from tidelog.server.replica.manager import now_ms as rm_now_ms
from tidelog.storage.log_manager import LogManager
from tidelog.zk import LiveBroker
from tidelog.zk.znodes import BrokerRegistration, EndPoint

KEY = "tidelog.testing.peer.addresses"
BASE = {"log.dirs": "/tmp/x", "broker.id": "1"}


def config(peers: str, log_dir: str = "/tmp/x") -> BrokerConfig:
    return load_broker_config(
        {**BASE, "log.dirs": log_dir, "zookeeper.connect": "127.0.0.1:1", KEY: peers}
    )


# -- parsing --------------------------------------------------------------------------------


def test_listed_peers_are_mapped_and_the_others_keep_their_registered_address() -> None:
    c = config(" 2=127.0.0.1:4002 , 3=localhost:4003,")
    assert c.peer_address(2, "broker2.example", 9092) == ("127.0.0.1", 4002)
    assert c.peer_address(3, "broker3.example", 9092) == ("localhost", 4003)
    assert c.peer_address(4, "broker4.example", 9094) == ("broker4.example", 9094)
    # DescribeConfigs' string form: the canonical list.
    assert str(c[KEY]) == "2=127.0.0.1:4002,3=localhost:4003"
    assert KEY in c.explicit


def test_default_maps_nobody() -> None:
    c = load_broker_config(BASE)
    assert c.peer_address(2, "127.0.0.1", 9092) == ("127.0.0.1", 9092)
    assert str(c[KEY]) == ""
    assert config("").peer_address(2, "h", 1) == ("h", 1)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2", "entry '2' must look like brokerId=host:port"),
        ("x=127.0.0.1:1", "entry 'x=127.0.0.1:1': broker id 'x' must be a non-negative integer"),
        ("-1=127.0.0.1:1", "entry '-1=127.0.0.1:1': broker id '-1' must be a non-negative integer"),
        ("2=127.0.0.1", "entry '2=127.0.0.1': address '127.0.0.1' must be host:port"),
        ("2=:9092", "entry '2=:9092': address ':9092' must be host:port"),
        ("2=a b:9092", "entry '2=a b:9092': address 'a b:9092' must be host:port"),
        ("2=h:0", "entry '2=h:0': port '0' must be between 1 and 65535"),
        ("2=h:70000", "entry '2=h:70000': port '70000' must be between 1 and 65535"),
        ("2=h:http", "entry '2=h:http': port 'http' must be between 1 and 65535"),
        ("2=h:1,2=h:2", "broker 2 is listed twice"),
    ],
)
def test_bad_values_name_the_key_and_the_entry(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config(value)
    assert str(info.value) == f"{KEY}: invalid value {value!r}: {message}"
    assert info.value.key == KEY


def test_a_bad_value_stops_broker_start_up_with_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text(f"broker.id=1\nlog.dirs={tmp_path / 'logs'}\n")
    code = main(["broker", "--config", str(properties), "--override", f"{KEY}=2=127.0.0.1:99999"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"tidelog broker: invalid configuration: {KEY}: invalid value '2=127.0.0.1:99999': "
        "entry '2=127.0.0.1:99999': port '99999' must be between 1 and 65535"
    )
    assert not (tmp_path / "logs").exists()


# -- the mapping is used by every broker -> broker connection -------------------------------


class Listener:
    """A loopback listener standing in for a link proxy: records what connects to it."""

    def __init__(self) -> None:
        self.connections = 0
        self.first_bytes = asyncio.Event()
        self._writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> Listener:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self.server is not None
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        if await reader.read(4):  # the request's size prefix: never answered
            self.first_bytes.set()

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self._writers:
            writer.close()
        await self.server.wait_closed()


async def closed_port() -> int:
    """A loopback port nobody listens on (the peer's registered address)."""
    server = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
    port: int = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    return port


def live_broker(broker_id: int, port: int) -> LiveBroker:
    registration = BrokerRegistration(
        broker_id=BrokerId(broker_id),
        endpoints=(EndPoint("PLAINTEXT", "127.0.0.1", port),),
    )
    return LiveBroker(registration, broker_epoch=10)


def cluster_node(tmp_path: Path, peers: str) -> ClusterNode:
    c = config(peers, str(tmp_path))
    logs = LogManager([tmp_path], log_config_for(effective_topic_config(c, {})), now_ms=rm_now_ms())
    return ClusterNode(c, ReplicaManager(c, logs), ClusterMetadataCache(1), {})


def test_controller_channel_connects_to_the_mapped_address(tmp_path: Path) -> None:
    async def body() -> None:
        async with Listener() as link:
            peers = config(f"2=127.0.0.1:{link.port}", str(tmp_path))
            sender = RpcControllerSender(BrokerId(1), peers.peer_address)
            broker = live_broker(2, await closed_port())
            sender.update_metadata(broker, ControllerEpoch(1), [], [broker])
            await asyncio.wait_for(link.first_bytes.wait(), 10.0)
            assert link.connections == 1
            await sender.close()

    asyncio.run(body())


def test_follower_fetcher_connects_to_the_mapped_address(tmp_path: Path) -> None:
    async def body() -> None:
        async with Listener() as link:
            node = cluster_node(tmp_path, f"2=127.0.0.1:{link.port}")
            registered = await closed_port()
            tp = TopicPartition("t", 0)
            answer = await node.handle_leader_and_isr(
                control.LeaderAndIsrRequest(
                    controller_id=2,
                    controller_epoch=1,
                    partition_states=(
                        control.LeaderAndIsrPartitionState(
                            topic_name=tp.topic,
                            partition_index=tp.partition,
                            controller_epoch=1,
                            leader=2,
                            leader_epoch=0,
                            isr=(1, 2),
                            partition_epoch=0,
                            replicas=(1, 2),
                        ),
                    ),
                    topic_ids=(control.TopicIdEntry(topic_name="t", topic_id=uuid.UUID(int=3)),),
                    live_leaders=(
                        control.LeaderAndIsrLiveLeader(
                            broker_id=2, host_name="127.0.0.1", port=registered
                        ),
                    ),
                )
            )
            assert [e.error_code for e in answer.partition_errors] == [0]
            fetcher = node.fetchers.fetchers[2]
            assert (fetcher.host, fetcher.port) == ("127.0.0.1", link.port)
            await asyncio.wait_for(link.first_bytes.wait(), 10.0)
            assert link.connections == 1
            await node.fetchers.stop()
            await node.client.close()

    asyncio.run(body())


def test_requests_to_the_controller_go_to_the_mapped_address(tmp_path: Path) -> None:
    async def body() -> None:
        async with Listener() as link:
            node = cluster_node(tmp_path, f"2=127.0.0.1:{link.port}")
            node.metadata.controller_id = 2
            node.metadata.brokers[2] = CachedBroker(2, "127.0.0.1", await closed_port())
            # The connection opens with ApiVersions, which this listener never answers.
            connecting = asyncio.create_task(node._connection_to_controller())
            await asyncio.wait_for(link.first_bytes.wait(), 10.0)
            assert link.connections == 1
            await cancel_and_wait(connecting)
            await node.client.close()

    asyncio.run(body())
