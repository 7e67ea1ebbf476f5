"""The kazoo adapter against the real ZooKeeper server: Kafka's znodes, CAS, sessions."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient

from tidelog.model import BrokerId, LeaderEpoch, PartitionEpoch, TopicPartition
from tidelog.zk import (
    BrokerIdInUseError,
    SessionEvent,
    StateWriteOutcome,
    TopicCreateOutcome,
    ZkClient,
    ZkError,
    znodes,
)
from tidelog.zk.znodes import BrokerRegistration, EndPoint, PartitionState, TopicAssignment

from .conftest import TEST_SESSION_TIMEOUT_MS

pytestmark = pytest.mark.integration

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


async def connect(zk_connect: str) -> ZkClient:
    return await ZkClient.connect(zk_connect, session_timeout_ms=TEST_SESSION_TIMEOUT_MS)


def registration(broker_id: int, port: int = 9092) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id=BrokerId(broker_id), endpoints=(EndPoint("PLAINTEXT", "127.0.0.1", port),)
    )


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.02)


def raw_client(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect)
    client.start(timeout=10)
    return client


def test_chroot_and_persistent_paths_are_created(zk_connect: str) -> None:
    async def body() -> None:
        zk = await connect(zk_connect)
        await zk.close()

    run(body())
    hosts, chroot = zk_connect.split("/", 1)
    raw = raw_client(hosts)
    try:
        for path in znodes.PERSISTENT_PATHS:
            assert raw.exists(f"/{chroot}{path}") is not None, path
    finally:
        raw.stop()
        raw.close()


def test_register_brokers_epochs_and_watch(zk_connect: str) -> None:
    async def body() -> None:
        a, b = await connect(zk_connect), await connect(zk_connect)
        seen: list[frozenset[BrokerId]] = []
        threads: set[threading.Thread] = set()

        def on_brokers(ids: frozenset[BrokerId]) -> None:
            threads.add(threading.current_thread())
            seen.append(ids)

        await a.watch_brokers(on_brokers)
        epoch1 = await a.register_broker(registration(1, 9092))
        epoch2 = await b.register_broker(registration(2, 9093))
        assert epoch2 > epoch1 > 0
        live = await a.get_live_brokers()
        assert set(live) == {1, 2}
        assert live[BrokerId(1)].broker_epoch == epoch1
        assert live[BrokerId(2)].registration.endpoints == (
            EndPoint("PLAINTEXT", "127.0.0.1", 9093),
        )
        await wait_for(lambda: bool(seen) and seen[-1] == {1, 2})
        # Closing a session deletes its ephemeral registration at once; the watch sees it.
        await b.close()
        await wait_for(lambda: seen[-1] == {1})
        assert threads == {threading.current_thread()}  # callbacks only ever on the loop
        assert set(await a.get_live_brokers()) == {1}
        await a.close()

    run(body())


def test_broker_id_held_by_another_live_session(zk_connect: str) -> None:
    async def body() -> None:
        a, b = await connect(zk_connect), await connect(zk_connect)
        await a.register_broker(registration(7))
        with pytest.raises(BrokerIdInUseError, match=r"broker\.id=7"):
            await b.register_broker(registration(7), wait_for_stale_s=0.5)
        first = (await b.get_live_brokers())[BrokerId(7)].broker_epoch
        await a.close()
        second = await b.register_broker(registration(7), wait_for_stale_s=5)
        assert second > first
        await b.close()

    run(body())


_ORPHAN = """
import asyncio, sys
from tidelog.zk import ZkClient
from tidelog.zk.znodes import BrokerRegistration, EndPoint
async def main():
    zk = await ZkClient.connect(sys.argv[1], session_timeout_ms=int(sys.argv[2]))
    epoch = await zk.register_broker(BrokerRegistration(
        broker_id=3, endpoints=(EndPoint("PLAINTEXT", "127.0.0.1", 9999),)))
    print(epoch, flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


def test_restarted_broker_waits_out_its_previous_sessions_node(
    zk_connect: str, tmp_path: Path
) -> None:
    # A broker process killed with SIGKILL leaves its registration until its session expires;
    # the restarted broker waits for that instead of failing.
    with subprocess.Popen(
        [sys.executable, "-c", _ORPHAN, zk_connect, str(TEST_SESSION_TIMEOUT_MS)],
        stdout=subprocess.PIPE,
        text=True,
    ) as orphan:
        try:
            assert orphan.stdout is not None
            old_epoch = int(orphan.stdout.readline())
        finally:
            orphan.kill()  # by its PID, like a crashed broker: no session close
            orphan.wait()

    async def body() -> None:
        zk = await connect(zk_connect)
        assert BrokerId(3) in await zk.get_live_brokers()  # still there: session not expired
        new_epoch = await zk.register_broker(registration(3))
        assert new_epoch > old_epoch
        assert (await zk.get_live_brokers())[BrokerId(3)].broker_epoch == new_epoch
        await zk.close()

    run(body())


def test_controller_election_failover_and_fencing(zk_connect: str) -> None:
    async def body() -> None:
        a, b = await connect(zk_connect), await connect(zk_connect)
        assert await a.get_controller_epoch() is None
        won = await a.try_become_controller(BrokerId(1))
        assert won.seat is not None
        assert won.seat.controller_epoch == 1
        lost = await b.try_become_controller(BrokerId(2))
        assert lost.seat is None
        assert lost.current_controller == 1
        assert await b.get_controller() == 1

        controllers: list[BrokerId | None] = []
        await b.watch_controller(controllers.append)
        await wait_for(lambda: controllers == [1])

        tp = TopicPartition("t", 0)
        await a.create_topic("t", TopicAssignment(partitions={0: (1, 2)}, topic_id=None), {})
        state = PartitionState(
            leader=BrokerId(1),
            leader_epoch=LeaderEpoch(0),
            isr=(BrokerId(1), BrokerId(2)),
            controller_epoch=won.seat.controller_epoch,
        )
        created = await a.create_partition_states({tp: state}, won.seat)
        assert created[tp].outcome is StateWriteOutcome.UPDATED

        # The controller's session ends: the other broker sees /controller vanish and wins
        # with the next epoch.
        await a.close()
        await wait_for(lambda: controllers[-1] is None)
        again = await b.try_become_controller(BrokerId(2))
        assert again.seat is not None
        assert again.seat.controller_epoch == 2
        await wait_for(lambda: controllers[-1] == 2)
        assert await b.get_controller_epoch() == (2, again.seat.epoch_zk_version)

        # The old seat is fenced: a write with it changes nothing.
        zombie = await b.update_partition_states({tp: state}, won.seat)
        assert zombie[tp].outcome is StateWriteOutcome.CONTROLLER_MOVED
        assert (await b.get_partition_states([tp]))[tp].partition_epoch == 0
        assert not await b.resign_controller(won.seat)
        assert await b.resign_controller(again.seat)
        assert await b.get_controller() is None
        await b.close()

    run(body())


def test_partition_state_compare_and_set(zk_connect: str) -> None:
    async def body() -> None:
        zk = await connect(zk_connect)
        seat = (await zk.try_become_controller(BrokerId(1))).seat
        assert seat is not None
        tps = [TopicPartition("orders", p) for p in range(3)]
        assignment = TopicAssignment(partitions=dict.fromkeys(range(3), (1, 2, 3)), topic_id=None)
        await zk.create_topic("orders", assignment, {})
        nowhere = TopicPartition("unknown-topic", 0)
        initial = {
            tp: PartitionState(
                leader=BrokerId(1),
                leader_epoch=LeaderEpoch(0),
                isr=(BrokerId(1), BrokerId(2), BrokerId(3)),
                controller_epoch=seat.controller_epoch,
            )
            for tp in tps
        }
        created = await zk.create_partition_states(initial, seat)
        assert {r.outcome for r in created.values()} == {StateWriteOutcome.UPDATED}
        again = await zk.create_partition_states(
            {tps[0]: initial[tps[0]], nowhere: initial[tps[0]]}, seat
        )
        assert again[tps[0]].outcome is StateWriteOutcome.NODE_EXISTS
        assert again[nowhere].outcome is StateWriteOutcome.NO_NODE

        read = await zk.get_partition_states([*tps, TopicPartition("orders", 9)])
        assert set(read) == set(tps)
        assert read[tps[0]] == initial[tps[0]]

        # A shrink with the right partition epoch goes through and bumps it ...
        shrunk = PartitionState(
            leader=BrokerId(1),
            leader_epoch=LeaderEpoch(0),
            isr=(BrokerId(1), BrokerId(2)),
            controller_epoch=seat.controller_epoch,
            partition_epoch=PartitionEpoch(0),
        )
        stale_proposal = PartitionState(
            leader=BrokerId(2),
            leader_epoch=LeaderEpoch(1),
            isr=(BrokerId(2),),
            controller_epoch=seat.controller_epoch,
            partition_epoch=PartitionEpoch(0),
        )
        results = await zk.update_partition_states(
            {tps[0]: shrunk, TopicPartition("orders", 9): shrunk}, seat
        )
        assert results[tps[0]].outcome is StateWriteOutcome.UPDATED
        assert results[tps[0]].state is not None
        assert results[tps[0]].state.partition_epoch == 1
        assert results[TopicPartition("orders", 9)].outcome is StateWriteOutcome.NO_NODE
        # ... and a write based on the old partition epoch loses, as a value.
        lost = await zk.update_partition_states({tps[0]: stale_proposal}, seat)
        assert lost[tps[0]].outcome is StateWriteOutcome.BAD_VERSION
        assert lost[tps[0]].state is None
        now = (await zk.get_partition_states([tps[0]]))[tps[0]]
        assert now.isr == (1, 2)
        assert now.partition_epoch == 1

        # Many partitions go in batched multi-ops (100 per multi); a batch where one
        # compare-and-set loses is settled partition by partition, so only that one loses.
        many = [TopicPartition("many", p) for p in range(250)]
        await zk.create_topic(
            "many",
            TopicAssignment(partitions=dict.fromkeys(range(250), (1, 2, 3)), topic_id=None),
            {},
        )
        made = await zk.create_partition_states(dict.fromkeys(many, initial[tps[0]]), seat)
        assert {r.outcome for r in made.values()} == {StateWriteOutcome.UPDATED}
        writes = dict.fromkeys(many, shrunk)
        writes[many[150]] = replace(shrunk, partition_epoch=PartitionEpoch(7))  # stale
        updated = await zk.update_partition_states(writes, seat)
        outcomes = {tp: r.outcome for tp, r in updated.items()}
        assert outcomes.pop(many[150]) is StateWriteOutcome.BAD_VERSION
        assert set(outcomes.values()) == {StateWriteOutcome.UPDATED}
        read_back = await zk.get_partition_states(many)
        assert read_back[many[150]].partition_epoch == 0
        assert {read_back[tp].partition_epoch for tp in many if tp != many[150]} == {1}
        await zk.close()

    run(body())


def test_topics_configs_and_deletion(zk_connect: str) -> None:
    async def body() -> None:
        zk = await connect(zk_connect)
        seen: list[frozenset[str]] = []
        await zk.watch_topics(seen.append)
        topic_id = uuid.uuid4()
        assignment = TopicAssignment(
            partitions={0: (BrokerId(1), BrokerId(2)), 1: (BrokerId(2), BrokerId(1))},
            topic_id=topic_id,
        )
        config = {"min.insync.replicas": "2"}
        assert await zk.create_topic("orders", assignment, config) is TopicCreateOutcome.CREATED
        assert await zk.create_topic("orders", assignment, {}) is TopicCreateOutcome.ALREADY_EXISTS
        with pytest.raises(ValueError, match="illegal"):
            await zk.create_topic("a/b", assignment, {})
        await wait_for(lambda: bool(seen) and seen[-1] == {"orders"})
        assert await zk.get_topics() == {"orders"}
        assert await zk.get_topic_assignment("orders") == assignment
        assert await zk.get_topic_assignment("nope") is None
        assert await zk.get_topic_config("orders") == config

        await zk.set_topic_config("orders", {"retention.ms": "1000"})
        assert await zk.get_topic_config("orders") == {"retention.ms": "1000"}

        assert not await zk.mark_topic_for_deletion("nope")
        assert await zk.mark_topic_for_deletion("orders")
        assert await zk.get_topics_marked_for_deletion() == {"orders"}
        seat = (await zk.try_become_controller(BrokerId(1))).seat
        assert seat is not None
        await zk.delete_topic_znodes("orders", seat)
        assert await zk.get_topics() == frozenset()
        assert await zk.get_topics_marked_for_deletion() == frozenset()
        assert await zk.get_topic_config("orders") == {}
        await wait_for(lambda: seen[-1] == frozenset())
        await zk.close()

    run(body())
    # The change notification is Kafka's shape.
    raw = raw_client(zk_connect)
    try:
        changes = raw.get_children(znodes.CONFIG_CHANGES_PATH)
        assert len(changes) == 1
        assert changes[0].startswith("config_change_")
        data, _ = raw.get(f"{znodes.CONFIG_CHANGES_PATH}/{changes[0]}")
        assert znodes.decode_config_change(data) == "orders"
    finally:
        raw.stop()
        raw.close()


def test_cluster_id_is_created_once(zk_connect: str) -> None:
    async def body() -> tuple[str, str]:
        a, b = await connect(zk_connect), await connect(zk_connect)
        ids = await a.get_or_create_cluster_id(), await b.get_or_create_cluster_id()
        await a.close()
        await b.close()
        return ids

    first, second = run(body())
    assert first == second
    assert len(first) == 22


def expire_session(zk_connect: str, zk: ZkClient) -> None:
    """Expire ``zk``'s session for real: open the same session elsewhere and close it."""
    session_id, password = zk._kz.client_id  # the test reaches in: kazoo's own technique
    twin = KazooClient(hosts=zk_connect, client_id=(session_id, password))
    twin.start(timeout=10)
    twin.stop()
    twin.close()


def test_session_expiry_reregisters_with_a_new_epoch(zk_connect: str) -> None:
    async def body() -> None:
        zk = await connect(zk_connect)
        watcher = await connect(zk_connect)
        events: list[tuple[SessionEvent, Any]] = []
        zk.add_session_listener(lambda event, epoch: events.append((event, epoch)))
        old_epoch = await zk.register_broker(registration(5))
        seat = (await zk.try_become_controller(BrokerId(5))).seat
        assert seat is not None

        await asyncio.to_thread(expire_session, zk_connect, zk)
        await wait_for(lambda: any(e is SessionEvent.REESTABLISHED for e, _ in events))
        kinds = [e for e, _ in events]
        assert SessionEvent.EXPIRED in kinds
        assert kinds.index(SessionEvent.EXPIRED) < kinds.index(SessionEvent.REESTABLISHED)
        new_epoch = next(epoch for e, epoch in events if e is SessionEvent.REESTABLISHED)
        assert new_epoch is not None
        assert new_epoch > old_epoch
        assert zk.broker_epoch == new_epoch
        live = await watcher.get_live_brokers()
        assert live[BrokerId(5)].broker_epoch == new_epoch
        # Controllership is not silently kept: /controller died with the old session.
        assert await watcher.get_controller() is None
        await zk.close()
        await watcher.close()

    run(body())


def test_zookeeper_restart_keeps_the_broker_registered(tmp_path: Path) -> None:
    # ZooKeeper restarts. The client sees SUSPENDED; then either the same session comes back
    # (RECONNECTED: registration and broker epoch intact) or — when the client's reconnect
    # lands in the server's start-up window, where the handshake can stall for a whole
    # session timeout, as in every ZooKeeper client — the session is lost and re-established
    # (EXPIRED, REESTABLISHED: registered again with a new broker epoch). Either way the
    # broker ends up registered under its current session, and a call made during the outage
    # completes (or fails as ZkError) instead of hanging.
    from tidelog.testing.zookeeper import ZooKeeperProcess

    server = ZooKeeperProcess(tmp_path / "zk", tick_time_ms=250)
    server.start()
    port = server.client_port
    restarted = ZooKeeperProcess(tmp_path / "zk", client_port=port, tick_time_ms=250)

    async def body() -> None:
        zk = await ZkClient.connect(server.connect_string + "/x", session_timeout_ms=8000)
        events: list[SessionEvent] = []
        zk.add_session_listener(lambda event, _epoch: events.append(event))
        epoch = await zk.register_broker(registration(1))
        session = zk.session_id
        await asyncio.to_thread(server.stop)
        await wait_for(lambda: SessionEvent.SUSPENDED in events)
        pending = asyncio.ensure_future(zk.get_live_brokers())
        await asyncio.to_thread(restarted.start)
        await wait_for(
            lambda: SessionEvent.RECONNECTED in events or SessionEvent.REESTABLISHED in events,
            timeout_s=30,
        )
        with contextlib.suppress(ZkError):
            await pending
        live = await zk.get_live_brokers()
        if SessionEvent.RECONNECTED in events:
            assert SessionEvent.EXPIRED not in events
            assert zk.session_id == session
            assert live[BrokerId(1)].broker_epoch == epoch
        else:
            assert events.index(SessionEvent.EXPIRED) < events.index(SessionEvent.REESTABLISHED)
            assert zk.session_id != session
            assert live[BrokerId(1)].broker_epoch == zk.broker_epoch
            assert zk.broker_epoch is not None
            assert zk.broker_epoch > epoch
        await zk.close()

    try:
        run(body())
    finally:
        server.stop()
        restarted.stop()
