"""Transactional requests that are wrong, against a live broker: each gets Kafka's error
code (issue 19), the broker keeps serving, and nothing already written changes."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from kio.schema.add_partitions_to_txn.v1 import request as apt_v1
from kio.schema.add_partitions_to_txn.v3 import request as apt_v3
from kio.schema.end_txn.v1 import request as end_v1
from kio.schema.end_txn.v3 import request as end_v3
from kio.schema.find_coordinator.v4 import request as fc
from kio.schema.init_producer_id.v4 import request as init_v4
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i8, i16, i32

from tests.harness import BrokerProcess, wait_until
from tidelog.client import BlockingClient, FetchRequestPartition, NewTopic
from tidelog.client.records import Record, build_batch, build_control_batch, decode_records
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

pytestmark = pytest.mark.integration


def _ms(value: int) -> Any:
    return datetime.timedelta(milliseconds=value)


def _init(client: BlockingClient, txn_id: str, timeout_ms: int = 60000) -> Any:
    return client.send(
        init_v4.InitProducerIdRequest(
            transactional_id=TransactionalId(txn_id),
            transaction_timeout=_ms(timeout_ms),
            producer_id=ProducerId(-1),
            producer_epoch=i16(-1),
        )
    )


def _add(
    client: BlockingClient,
    module: Any,
    txn_id: str,
    producer: tuple[int, int],
    parts: list[tuple[str, int]],
) -> dict[tuple[str, int], ErrorCode]:
    pid, epoch = producer
    by_topic: dict[str, list[int]] = {}
    for topic, p in parts:
        by_topic.setdefault(topic, []).append(p)
    answer = client.send(
        module.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TransactionalId(txn_id),
            v3_and_below_producer_id=ProducerId(pid),
            v3_and_below_producer_epoch=i16(epoch),
            v3_and_below_topics=tuple(
                module.AddPartitionsToTxnTopic(
                    name=TopicName(t), partitions=tuple(i32(p) for p in ps)
                )
                for t, ps in by_topic.items()
            ),
        )
    )
    return {
        (t.name, int(r.partition_index)): ErrorCode(int(r.partition_error_code))
        for t in answer.results_by_topic_v3_and_below
        for r in t.results_by_partition
    }


def _end(client: BlockingClient, module: Any, txn_id: str, pid: int, epoch: int) -> ErrorCode:
    answer = client.send(
        module.EndTxnRequest(
            transactional_id=TransactionalId(txn_id),
            producer_id=ProducerId(pid),
            producer_epoch=i16(epoch),
            committed=True,
        )
    )
    return ErrorCode(int(answer.error_code))


def test_bad_transactional_requests_get_kafkas_error_codes(broker: BrokerProcess) -> None:
    topic = f"txn-bad-{uuid.uuid4().hex[:8]}"
    txn_id = f"bad-{uuid.uuid4().hex[:8]}"
    with BlockingClient(broker.bootstrap, request_timeout_s=30.0) as client:
        created = client.create_topics([NewTopic(topic, 1, 1)])
        assert created[topic].error_code == ErrorCode.NONE, created
        tp = TopicPartition(topic, 0)
        first = client.produce(tp, build_batch([Record(value=b"kept")]), acks=-1)
        assert first is not None
        assert first.error_code == ErrorCode.NONE, first

        def coordinator() -> Any:
            (answer,) = client.send(
                fc.FindCoordinatorRequest(key_type=i8(1), coordinator_keys=(txn_id,))
            ).coordinators
            return answer if answer.error_code == ErrorCode.NONE else None

        found = wait_until(coordinator, 60.0, "a transaction coordinator")
        assert int(found.node_id) == broker.broker_id
        (unknown_type,) = client.send(
            fc.FindCoordinatorRequest(key_type=i8(5), coordinator_keys=(txn_id,))
        ).coordinators
        assert unknown_type.error_code == ErrorCode.INVALID_REQUEST

        # transaction.max.timeout.ms is 900000 by default.
        too_long = _init(client, txn_id, timeout_ms=900001)
        assert too_long.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        # An id never initialised: no producer id maps to it.
        assert _end(client, end_v3, f"never-{txn_id}", 1, 0) == (
            ErrorCode.INVALID_PRODUCER_ID_MAPPING
        )

        init = _init(client, txn_id)
        assert init.error_code == ErrorCode.NONE
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        # Nothing begun: there is nothing to end.
        assert _end(client, end_v3, txn_id, pid, epoch) == ErrorCode.INVALID_TXN_STATE
        # A stale epoch is fenced: PRODUCER_FENCED from v2 on (KIP-588), older versions
        # INVALID_PRODUCER_EPOCH.
        assert _add(client, apt_v3, txn_id, (pid, epoch + 1), [(topic, 0)]) == {
            (topic, 0): ErrorCode.PRODUCER_FENCED
        }
        assert _add(client, apt_v1, txn_id, (pid, epoch + 1), [(topic, 0)]) == {
            (topic, 0): ErrorCode.INVALID_PRODUCER_EPOCH
        }
        assert _end(client, end_v1, txn_id, pid, epoch + 1) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert _add(client, apt_v3, txn_id, (pid + 1, epoch), [(topic, 0)]) == {
            (topic, 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING
        }
        # One unknown partition: it is named, the others are not attempted.
        assert _add(client, apt_v3, txn_id, (pid, epoch), [(topic, 0), (topic, 7)]) == {
            (topic, 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
            (topic, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }

        # A client may not write a transaction marker itself.
        marker = build_control_batch(pid, epoch, True, 0, 0)
        refused = client.produce(tp, marker, acks=-1)
        assert refused is not None
        assert refused.error_code == ErrorCode.INVALID_RECORD

        # The transaction started properly, a non-transactional batch of the same producer
        # is refused while it is open.
        assert _add(client, apt_v3, txn_id, (pid, epoch), [(topic, 0)]) == {
            (topic, 0): ErrorCode.NONE
        }
        txn_batch = build_batch(
            [Record(value=b"in-txn")],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
            is_transactional=True,
        )
        written = client.produce(tp, txn_batch, acks=-1, transactional_id=txn_id)
        assert written is not None
        assert written.error_code == ErrorCode.NONE
        plain = build_batch(
            [Record(value=b"outside")], producer_id=pid, producer_epoch=epoch, base_sequence=1
        )
        outside = client.produce(tp, plain, acks=-1, transactional_id=txn_id)
        assert outside is not None
        assert outside.error_code == ErrorCode.INVALID_TXN_STATE
        assert _end(client, end_v3, txn_id, pid, epoch) == ErrorCode.NONE

        # The broker still serves, and what was there is there: the first record, the
        # transaction's record and its marker, nothing of the refused batches.
        def committed() -> list[bytes] | None:
            got = client.fetch({tp: FetchRequestPartition(0)}, isolation_level=1)[tp]
            values = [r.value for r in decode_records(got.records)]
            return values if len(values) == 2 else None

        assert wait_until(committed, 30.0, "the committed records") == [b"kept", b"in-txn"]
