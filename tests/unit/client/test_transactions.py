"""The client's transactional APIs against a fake broker whose coordinator is tidelog's
state machine: FindCoordinator (single key and batched versions), InitProducerId,
AddPartitionsToTxn, EndTxn, and DescribeTransactions with the -1 start time kio cannot read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from tidelog.client import Client, Record, build_batch
from tidelog.client.client import COORDINATOR_TRANSACTION
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import SUPPORTED_VERSIONS, ApiKey

from .fake_txn_broker import FakeTxnBroker

TP = TopicPartition("events", 0)


def run(test: Callable[[FakeTxnBroker], Awaitable[None]], broker: FakeTxnBroker) -> None:
    async def main() -> None:
        fake = await broker.start()
        try:
            await asyncio.wait_for(test(fake), 20)
        finally:
            await fake.stop()

    asyncio.run(main())


@pytest.mark.parametrize("version", [1, 3, 4, 6])
def test_find_coordinator_single_and_batched_versions(version: int) -> None:
    versions = {**SUPPORTED_VERSIONS, ApiKey.FIND_COORDINATOR: (0, version)}

    async def scenario(fake: FakeTxnBroker) -> None:
        async with Client(fake.bootstrap) as client:
            found = await client.find_coordinator("tx", key_type=COORDINATOR_TRANSACTION)
            assert found.error_code == ErrorCode.NONE
            assert (found.node_id, found.host, found.port) == (0, "127.0.0.1", fake.port)
            fake.inject[ApiKey.FIND_COORDINATOR] = [ErrorCode.COORDINATOR_NOT_AVAILABLE]
            busy = await client.find_coordinator("tx")
            assert busy.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert {h.api_version for h in fake.requests if h.api_key == 10} == {version}

    run(scenario, FakeTxnBroker(versions=versions))


def test_describe_reads_the_minus_one_start_time_of_idle_and_unknown_ids() -> None:
    async def scenario(fake: FakeTxnBroker) -> None:
        async with Client(fake.bootstrap) as client:
            (unknown,) = await client.describe_transactions(["tx"])
            assert unknown.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            assert unknown.start_ms is None

            init = await client.init_producer_id("tx", transaction_timeout_ms=60000)
            assert init.error_code == ErrorCode.NONE
            assert (init.producer_id, init.producer_epoch) == (1000, 0)
            (empty,) = await client.describe_transactions(["tx"])
            assert (empty.state, empty.start_ms, empty.timeout_ms) == ("Empty", None, 60000)
            assert (empty.producer_id, empty.producer_epoch) == (1000, 0)

            added = await client.add_partitions_to_txn("tx", 1000, 0, [TP])
            assert added == {TP: ErrorCode.NONE}
            (ongoing,) = await client.describe_transactions(["tx"])
            assert ongoing.state == "Ongoing"
            assert ongoing.start_ms == fake.now_ms
            assert ongoing.partitions == (TP,)

            assert await client.end_txn("tx", 1000, 0, commit=True) == ErrorCode.NONE
            (done,) = await client.describe_transactions(["tx"])
            assert (done.state, done.start_ms, done.partitions) == ("CompleteCommit", None, ())
            # A retried commit of the same producer and epoch: NONE; an abort now: refused.
            assert await client.end_txn("tx", 1000, 0, commit=True) == ErrorCode.NONE
            assert await client.end_txn("tx", 1000, 0, commit=False) == (
                ErrorCode.INVALID_TXN_STATE
            )

    run(scenario, FakeTxnBroker())


def test_init_producer_id_fences_and_aborts_the_open_transaction() -> None:
    async def scenario(fake: FakeTxnBroker) -> None:
        fake.topics["events"] = fake.topics.get("events") or _topic()
        async with Client(fake.bootstrap) as client:
            first = await client.init_producer_id("tx", transaction_timeout_ms=60000)
            await client.add_partitions_to_txn("tx", first.producer_id, 0, [TP])
            batch = build_batch(
                [Record(b"k", b"v")],
                producer_id=first.producer_id,
                producer_epoch=0,
                base_sequence=0,
                is_transactional=True,
            )
            written = await client.produce(TP, batch, transactional_id="tx")
            assert written is not None
            assert written.error_code == ErrorCode.NONE
            # A new instance: its first InitProducerId aborts the open transaction
            # (CONCURRENT_TRANSACTIONS while that runs), the retry gets a higher epoch.
            again = await client.init_producer_id("tx", transaction_timeout_ms=60000)
            assert again.error_code == ErrorCode.CONCURRENT_TRANSACTIONS
            assert [(m.commit, m.producer_epoch) for m in fake.markers] == [(False, 1)]
            second = await client.init_producer_id("tx", transaction_timeout_ms=60000)
            assert (second.error_code, second.producer_epoch) == (ErrorCode.NONE, 2)
            # The old instance is fenced at the coordinator and on the partition.
            assert await client.end_txn("tx", first.producer_id, 0, commit=True) == (
                ErrorCode.PRODUCER_FENCED
            )
            stale = build_batch(
                [Record(b"k", b"v2")],
                producer_id=first.producer_id,
                producer_epoch=0,
                base_sequence=1,
                is_transactional=True,
            )
            late = await client.produce(TP, stale, transactional_id="tx")
            assert late is not None
            assert late.error_code == ErrorCode.INVALID_PRODUCER_EPOCH

    run(scenario, FakeTxnBroker())


def test_a_bad_transaction_timeout_is_answered() -> None:
    async def scenario(fake: FakeTxnBroker) -> None:
        async with Client(fake.bootstrap) as client:
            r = await client.init_producer_id("tx", transaction_timeout_ms=900_001)
            assert r.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT

    run(scenario, FakeTxnBroker())


def _topic() -> tuple[object, bytearray, list[int]]:
    import uuid

    return (uuid.uuid4(), bytearray(), [0])
