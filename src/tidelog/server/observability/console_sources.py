"""Where the web console's snapshot comes from: this broker alone, or the cluster.

The console (``tidelog.server.observability.console``) is given one ``SnapshotSource``
when the broker is composed and asks it for the topology part of each snapshot and for
the consumer groups; it never asks which kind of broker it serves:

- ``LocalSource``: a broker without ``zookeeper.connect`` leads every partition it hosts;
  its replica manager is the whole picture, and it has no consumer groups to ask others
  about (the previous list is kept);
- ``ClusterSource``: a cluster member reads its metadata cache and asks each leader one
  DescribeQuorum (API 55) for its partitions' replica states, and the live brokers for
  their consumer groups (the console's module docstring, rules 1, 2 and 5).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

from kio.schema.describe_quorum.v2 import request as dq_request
from kio.schema.list_groups.v4 import request as lg_request
from kio.schema.offset_fetch.v7 import request as of_request
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32

from tidelog.client import Client
from tidelog.model import TopicPartition
from tidelog.server.observability.metrics.broker_collector import ClusterSide
from tidelog.server.observability.metrics.zk_session import ZkSessionTracker, session_state

if TYPE_CHECKING:
    from tidelog.server.cluster.node import ClusterNode
    from tidelog.server.replica.manager import ReplicaManager

log = logging.getLogger(__name__)

#: How long the console waits for one leader's DescribeQuorum.
QUORUM_TIMEOUT_S: Final = 2.0


class SnapshotSource(Protocol):
    """What the console asks of the broker it shows."""

    async def topology(self, now_ms: int) -> dict[str, Any]:
        """The snapshot's brokers, controller, ZooKeeper and topics with replica states."""
        ...

    async def groups(self, previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The consumer groups' committed offsets (``previous``: the last answer)."""
        ...

    async def close(self) -> None: ...


def _replica_row(
    broker: int,
    leo: int,
    caught_up_ms: int,
    *,
    leader_leo: int,
    now_ms: int,
    in_isr: bool,
    is_leader: bool,
) -> dict[str, Any]:
    lag = None if leo < 0 else max(0, leader_leo - leo)
    if is_leader:
        lag_ms: int | None = 0
    elif caught_up_ms > 0:
        lag_ms = max(0, now_ms - caught_up_ms)
    else:
        lag_ms = None
    return {
        "id": broker,
        "leo": leo,
        "lag": lag,
        "lag_ms": lag_ms,
        "in_isr": in_isr,
        "leader": is_leader,
    }


def local_quorum(
    replica_manager: ReplicaManager, tp: TopicPartition, now_ms: int
) -> dict[str, Any] | None:
    """What DescribeQuorum would answer for ``tp`` if this broker leads it."""
    hosted = replica_manager.partitions.get(tp)
    if hosted is None or not hosted.partition.is_leader:
        return None
    p = hosted.partition
    leader_leo = hosted.log.log_end_offset
    rows = []
    for r in p.replicas:
        if r == p.local_broker_id:
            rows.append(
                _replica_row(
                    r,
                    leader_leo,
                    now_ms,
                    leader_leo=leader_leo,
                    now_ms=now_ms,
                    in_isr=r in p.isr,
                    is_leader=True,
                )
            )
        else:
            rs = p.replica_states.get(r)
            rows.append(
                _replica_row(
                    r,
                    -1 if rs is None else rs.log_end_offset,
                    0 if rs is None else rs.last_caught_up_time_ms,
                    leader_leo=leader_leo,
                    now_ms=now_ms,
                    in_isr=r in p.isr,
                    is_leader=False,
                )
            )
    return {
        "hw": p.high_watermark,
        "leo": leader_leo,
        "replica_states": rows,
        "status": "ok",
        "source": "local",
    }


class LocalSource:
    """A broker on its own: every partition it hosts, led here (module docstring)."""

    def __init__(self, broker_id: int, replica_manager: ReplicaManager) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager

    async def topology(self, now_ms: int) -> dict[str, Any]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, hosted in sorted(self.replica_manager.partitions.items()):
            q = local_quorum(self.replica_manager, tp, now_ms)
            topics.setdefault(tp.topic, []).append(
                {
                    "partition": tp.partition,
                    "leader": self.broker_id,
                    "leader_epoch": hosted.partition.leader_epoch,
                    "isr": [self.broker_id],
                    "replicas": [self.broker_id],
                    **(q or {"hw": None, "replica_states": [], "status": "unknown"}),
                }
            )
        return {
            "broker": self.broker_id,
            "cluster_id": "",
            "brokers": [{"id": self.broker_id, "alive": True, "host": "", "port": 0}],
            "controller": {"id": self.broker_id, "epoch": -1, "active_here": True},
            "zookeeper": {"state": "NONE"},
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }

    async def groups(self, previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return previous

    async def close(self) -> None:
        return None


class ClusterSource:
    """A cluster member: its metadata cache, each leader's DescribeQuorum, the brokers'
    consumer groups (module docstring). ``cluster`` answers whether this broker is the
    active controller and which ZooKeeper client it has; ``zk_session`` counts the
    session's losses for the ZooKeeper state shown."""

    def __init__(
        self,
        broker_id: int,
        node: ClusterNode,
        replica_manager: ReplicaManager,
        cluster: ClusterSide,
        zk_session: ZkSessionTracker | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.node = node
        self.replica_manager = replica_manager
        self.cluster = cluster
        self.zk_session = zk_session
        self._client: Client | None = None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def topology(self, now_ms: int) -> dict[str, Any]:
        return self._snapshot(await self._quorums())

    def _snapshot(self, quorum: Mapping[TopicPartition, dict[str, Any]]) -> dict[str, Any]:
        cache = self.node.metadata
        live = cache.brokers
        replica_ids: set[int] = set()
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, state in sorted(cache.partitions.items()):
            replica_ids.update(state.replicas)
            found = quorum.get(tp)
            row: dict[str, Any] = {
                "partition": tp.partition,
                "leader": state.leader,
                "leader_epoch": state.leader_epoch,
                "isr": list(state.isr),
                "replicas": list(state.replicas),
                "hw": None,
                "replica_states": [
                    {"id": r, "leo": None, "lag": None, "lag_ms": None, "in_isr": r in state.isr}
                    for r in state.replicas
                ],
                "status": "offline" if state.leader < 0 else "unreachable",
            }
            if found is not None:
                row.update(found)
            topics.setdefault(tp.topic, []).append(row)
        ids = sorted(set(live) | replica_ids)
        brokers = []
        for b in ids:
            info = live.get(b)
            brokers.append(
                {
                    "id": b,
                    "alive": info is not None,
                    "host": info.host if info else "",
                    "port": info.port if info else 0,
                    "rack": info.rack if info else None,
                }
            )
        zk = self.cluster.zk
        zk_state = (
            "NONE" if zk is None else session_state(connected=zk.connected, tracker=self.zk_session)
        )
        return {
            "broker": self.broker_id,
            "cluster_id": cache.cluster_id,
            "brokers": brokers,
            "controller": {
                "id": cache.controller_id,
                "epoch": cache.controller_epoch,
                "active_here": self.cluster.is_active_controller(),
            },
            "zookeeper": {
                "state": zk_state,
                "connect": zk.connect_string if zk is not None else "",
                "session_id": f"0x{zk.session_id:x}" if zk and zk.session_id else None,
            },
            "topics": [{"name": t, "partitions": ps} for t, ps in sorted(topics.items())],
        }

    async def _quorums(self) -> dict[TopicPartition, dict[str, Any]]:
        """Rule 2: one DescribeQuorum per leader, all at once, each with a timeout."""
        now_ms = int(time.time() * 1000)
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp, state in self.node.metadata.partitions.items():
            if state.leader >= 0:
                by_leader.setdefault(state.leader, []).append(tp)
        out: dict[TopicPartition, dict[str, Any]] = {}
        remote = []
        for leader, tps in by_leader.items():
            if leader == self.broker_id:
                for tp in tps:
                    q = local_quorum(self.replica_manager, tp, now_ms)
                    if q is not None:
                        out[tp] = q
            else:
                remote.append(self._remote_quorum(leader, tps, now_ms))
        for found in await asyncio.gather(*remote):
            out.update(found)
        return out

    def _peer_client(self) -> Client:
        if self._client is None:
            self._client = Client(
                [f"{host}:{port}" for host, port in self.node.client.bootstrap],
                client_id=f"console-{self.broker_id}",
                request_timeout_s=QUORUM_TIMEOUT_S,
                connect_timeout_s=QUORUM_TIMEOUT_S,
                security=self.node.peer_security,
            )
        return self._client

    async def _remote_quorum(
        self, leader: int, tps: Iterable[TopicPartition], now_ms: int
    ) -> dict[TopicPartition, dict[str, Any]]:
        broker = self.node.metadata.brokers.get(leader)
        address = None if broker is None else broker.address_on(self.node.listener_name)
        if address is None:
            return {}
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = dq_request.DescribeQuorumRequest(
            topics=tuple(
                dq_request.TopicData(
                    topic_name=TopicName(t),
                    partitions=tuple(dq_request.PartitionData(partition_index=i32(p)) for p in ps),
                )
                for t, ps in sorted(by_topic.items())
            )
        )
        try:
            async with asyncio.timeout(QUORUM_TIMEOUT_S):
                conn = await self._peer_client().connection_to(*address)
                response = await conn.send(request, timeout_s=QUORUM_TIMEOUT_S)
        except Exception as exc:  # any failure: its partitions show unreachable
            log.debug("console: DescribeQuorum to broker %s failed: %r", leader, exc)
            return {}
        out: dict[TopicPartition, dict[str, Any]] = {}
        for topic in response.topics:
            for part in topic.partitions:
                if int(part.error_code) != 0:
                    continue
                replicas = [(r, True) for r in part.current_voters] + [
                    (r, False) for r in part.observers
                ]
                leader_leo = next(
                    (int(r.log_end_offset) for r, _ in replicas if int(r.replica_id) == leader),
                    -1,
                )
                rows = [
                    _replica_row(
                        int(r.replica_id),
                        int(r.log_end_offset),
                        int(r.last_caught_up_timestamp),
                        leader_leo=leader_leo,
                        now_ms=now_ms,
                        in_isr=in_isr,
                        is_leader=int(r.replica_id) == leader,
                    )
                    for r, in_isr in replicas
                ]
                tp = TopicPartition(topic.topic_name, int(part.partition_index))
                cached = self.node.metadata.partitions.get(tp)
                order = {b: i for i, b in enumerate(cached.replicas if cached else ())}
                rows.sort(key=lambda row: order.get(row["id"], len(order)))
                out[tp] = {
                    "hw": int(part.high_watermark),
                    "leo": leader_leo,
                    "replica_states": rows,
                    "status": "ok",
                    "source": f"DescribeQuorum from broker {leader}",
                }
        return out

    async def groups(self, previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return await _describe_groups(self._peer_client(), self.node, previous)


async def _ask(client: Client, address: tuple[str, int], request: Any) -> Any:
    """``request`` to ``address``; None when it fails or takes over ``QUORUM_TIMEOUT_S``."""
    try:
        async with asyncio.timeout(QUORUM_TIMEOUT_S):
            conn = await client.connection_to(*address)
            return await conn.send(request)
    except Exception:
        return None


async def _describe_groups(
    client: Client, node: ClusterNode, previous: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Module rule 5. A group of a coordinator that did not answer keeps its last known
    offsets, marked ``stale``."""
    cache = node.metadata
    names: dict[str, int] = {}
    addresses = {
        b: address
        for b, broker in list(cache.brokers.items())
        if (address := broker.address_on(node.listener_name)) is not None
    }
    answers = await asyncio.gather(
        *(
            _ask(client, address, lg_request.ListGroupsRequest(states_filter=()))
            for address in addresses.values()
        )
    )
    silent = {b for b, answer in zip(addresses, answers, strict=True) if answer is None}
    for broker_id, answer in zip(addresses, answers, strict=True):
        for g in answer.groups if answer is not None else ():
            names[str(g.group_id)] = broker_id
    groups = [
        {**g, "stale": True}
        for g in previous
        if g["group"] not in names
        and (g["coordinator"] in silent or g["coordinator"] not in addresses)
    ]
    for group, coordinator in sorted(names.items()):
        response = await _ask(
            client,
            addresses[coordinator],
            of_request.OffsetFetchRequest(
                group_id=GroupId(group), topics=None, require_stable=False
            ),
        )
        if response is None:
            continue
        rows = []
        for topic in response.topics:
            for part in topic.partitions:
                tp = TopicPartition(str(topic.name), int(part.partition_index))
                rows.append(
                    {
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "committed": int(part.committed_offset),
                    }
                )
        groups.append({"group": group, "coordinator": coordinator, "partitions": rows})
    return sorted(groups, key=lambda g: str(g["group"]))


__all__ = [
    "QUORUM_TIMEOUT_S",
    "ClusterSource",
    "LocalSource",
    "SnapshotSource",
    "local_quorum",
]
