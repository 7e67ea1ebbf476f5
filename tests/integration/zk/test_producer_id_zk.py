"""Producer id blocks on the real ZooKeeper: Kafka's /latest_producer_id_block, CAS claims."""

from __future__ import annotations

import asyncio
import threading

import pytest
from kazoo.client import KazooClient

from tidelog.storage.producer_id import (
    ZK_PRODUCER_ID_BLOCK_PATH,
    ProducerIdBlock,
    ProducerIdManager,
)
from tidelog.zk import CorruptProducerIdBlockError

from .conftest import connect, run

pytestmark = pytest.mark.integration


def raw_client(zk_connect: str) -> tuple[KazooClient, str]:
    """A plain kazoo client on the server root, and the test's block znode path under its
    chroot (created here: the chroot may not exist yet)."""
    hosts, chroot = zk_connect.split("/", 1)
    client = KazooClient(hosts=hosts)
    client.start(timeout=10)
    client.ensure_path(f"/{chroot}")
    return client, f"/{chroot}{ZK_PRODUCER_ID_BLOCK_PATH}"


def test_first_claims_write_kafkas_json(zk_connect: str) -> None:
    async def body() -> None:
        zk = await connect(zk_connect)
        try:
            store = zk.producer_id_block_store()
            assert store.read() == (None, None)
            first = await asyncio.to_thread(store.allocate, 2, 1000)
            second = await asyncio.to_thread(store.allocate, 5, 1000)
        finally:
            await zk.close()
        assert first == ProducerIdBlock(2, 0, 999)
        assert second == ProducerIdBlock(5, 1000, 1999)

    run(body())
    raw, path = raw_client(zk_connect)
    try:
        data, stat = raw.get(path)
    finally:
        raw.stop()
        raw.close()
    # Byte for byte what Kafka's ProducerIdBlockZNode.generateProducerIdBlockJson writes.
    assert data == b'{"version":1,"broker":5,"block_start":"1000","block_end":"1999"}'
    assert stat.version == 1  # created once, then one compare-and-set


def test_continues_after_a_block_kafka_wrote_and_after_an_empty_node(zk_connect: str) -> None:
    raw, path = raw_client(zk_connect)
    try:
        # Kafka's start-up creates the node without data (PersistentZkPaths).
        raw.create(path, b"")

        async def claim(broker_id: int) -> ProducerIdBlock:
            zk = await connect(zk_connect)
            try:
                return await asyncio.to_thread(
                    zk.producer_id_block_store().allocate, broker_id, 1000
                )
            finally:
                await zk.close()

        assert run(claim(1)) == ProducerIdBlock(1, 0, 999)
        raw.set(
            path,
            b'{"version":1,"broker":0,"block_start":"7000","block_end":"7999"}',
        )
        assert run(claim(1)) == ProducerIdBlock(1, 8000, 8999)
    finally:
        raw.stop()
        raw.close()


def test_corrupt_node_is_refused_not_overwritten(zk_connect: str) -> None:
    raw, path = raw_client(zk_connect)
    try:
        raw.create(path, b'{"version":9}')

        async def body() -> str:
            zk = await connect(zk_connect)
            try:
                with pytest.raises(CorruptProducerIdBlockError) as info:
                    await asyncio.to_thread(zk.producer_id_block_store().allocate, 1, 1000)
                return str(info.value)
            finally:
                await zk.close()

        message = run(body())
        assert ZK_PRODUCER_ID_BLOCK_PATH in message
        assert "version" in message
        assert raw.get(path)[0] == b'{"version":9}'
    finally:
        raw.stop()
        raw.close()


def test_concurrent_claimers_never_overlap(zk_connect: str) -> None:
    """Two brokers (two sessions), four threads each, small blocks: every id handed out is
    unique and the claimed blocks tile 0..n without gaps or overlaps."""
    block_size = 7
    per_thread = 60

    async def body() -> tuple[list[int], list[ProducerIdBlock], int]:
        sessions = [await connect(zk_connect), await connect(zk_connect)]
        try:
            stores = [zk.producer_id_block_store() for zk in sessions]
            claimed: list[ProducerIdBlock] = []
            claimed_lock = threading.Lock()

            class RecordingStore:
                def __init__(self, index: int) -> None:
                    self.index = index

                def allocate(self, broker_id: int, size: int) -> ProducerIdBlock:
                    block = stores[self.index].allocate(broker_id, size)
                    with claimed_lock:
                        claimed.append(block)
                    return block

            managers = [
                ProducerIdManager(i + 1, RecordingStore(i), block_size=block_size) for i in (0, 1)
            ]
            barrier = threading.Barrier(8)
            results: list[list[int]] = [[] for _ in range(8)]

            def worker(index: int) -> None:
                manager = managers[index % 2]
                barrier.wait(timeout=30)
                results[index] = [manager.generate_producer_id() for _ in range(per_thread)]

            # Own threads: the default executor has fewer than 8 workers on 2 cores.
            threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                await asyncio.to_thread(thread.join, 60)
            ids = [pid for chunk in results for pid in chunk]
            return ids, claimed, sum(s.conflicts for s in stores)
        finally:
            for zk in sessions:
                await zk.close()

    ids, claimed, _conflicts = run(body())
    assert len(ids) == 8 * per_thread
    assert len(set(ids)) == len(ids), "an id was handed out twice"
    claimed.sort(key=lambda b: b.block_start)
    assert [b.block_start for b in claimed] == [i * block_size for i in range(len(claimed))]
    assert {b.broker_id for b in claimed} == {1, 2}
    for block in claimed:
        assert block.size == block_size
    # Every id comes from a block its broker claimed.
    assert all(any(b.block_start <= pid <= b.block_end for b in claimed) for pid in ids)


def test_restarted_broker_never_reuses_an_id(zk_connect: str) -> None:
    async def session_ids(count: int) -> list[int]:
        zk = await connect(zk_connect)
        try:
            manager = ProducerIdManager(3, zk.producer_id_block_store(), block_size=10)
            return [await asyncio.to_thread(manager.generate_producer_id) for _ in range(count)]
        finally:
            await zk.close()

    handed_out: list[int] = []
    for count in (3, 10, 1, 25):
        ids = run(session_ids(count))
        # Each restart starts after everything handed out before (the rest of a block is
        # skipped, as in Kafka).
        assert not handed_out or min(ids) > max(handed_out)
        assert ids == list(range(ids[0], ids[0] + count))
        handed_out.extend(ids)
    assert len(set(handed_out)) == len(handed_out)
