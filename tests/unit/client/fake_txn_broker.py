"""``FakeBroker`` plus the transactional APIs (unit tests only).

The coordinator side is tidelog's pure state machine (``tidelog.coordinator.txn``), with
every transition written at once and, unless ``hold_markers``, the markers of an ended
transaction written at once too. The partition side checks what an idempotent producer
depends on: per (topic, producer id) the epoch (older: INVALID_PRODUCER_EPOCH; markers
carry the epoch that fenced) and the sequence (a retry of the last batch: its original
offset, nothing appended; a gap: OUT_OF_ORDER_SEQUENCE_NUMBER). One partition per topic,
as in ``FakeBroker``.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.describe_transactions.v0.response import TopicData
from kio.schema.errors import ErrorCode as K
from kio.serial import entity_writer

from tidelog.client.describe_txn import DescribeTransactionsResponseV0, TransactionStateV0
from tidelog.coordinator.txn import Transition, TransitionKind, TxnConfig, TxnManager, TxnState
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader, encode_response
from tidelog.protocol.records import iter_batches, stamp_batch

from .fake_broker import FakeBroker, _m

_write_describe = entity_writer(DescribeTransactionsResponseV0)


@dataclass(frozen=True, slots=True)
class Marker:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class Appended:
    """A data batch as the fake partition took it."""

    topic: str
    base_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    transactional: bool
    transactional_id: str | None


@dataclass
class FakeTxnBroker(FakeBroker):
    txns: TxnManager = field(default_factory=lambda: TxnManager(TxnConfig()))
    #: Markers "written" (ended transactions), in order.
    markers: list[Marker] = field(default_factory=list)
    appended: list[Appended] = field(default_factory=list)
    #: Leave ended transactions in PrepareCommit/PrepareAbort (markers not yet written).
    hold_markers: bool = False
    #: API key -> error codes to answer (one per request, first first) before handling.
    inject: dict[int, list[ErrorCode]] = field(default_factory=dict)
    #: Produce: after appending the n-th batch (1-based), drop the connection unanswered.
    drop_after_append: set[int] = field(default_factory=set)
    #: (topic, producer id) -> (epoch, last base sequence, last count, last base offset)
    producers: dict[tuple[str, int], tuple[int, int, int, int]] = field(default_factory=dict)
    next_producer_id: int = 1000
    now_ms: int = 1_000_000
    _produce_count: int = 0

    # --- coordinator -------------------------------------------------------------------------

    def _apply(self, t: Transition) -> None:
        self.txns.complete(t)
        meta = t.after
        if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT) and not (
            self.hold_markers
        ):
            self.write_markers(meta.transactional_id)

    def write_markers(self, txn_id: str) -> None:
        meta = self.txns.get(txn_id)
        assert meta is not None
        commit = meta.state == TxnState.PREPARE_COMMIT
        self.markers.append(
            Marker(txn_id, meta.producer_id, meta.producer_epoch, commit, meta.partitions)
        )
        for tp in meta.partitions:  # a marker fences older epochs on its partition
            key = (tp.topic, meta.producer_id)
            _e, _s, _c, offset = self.producers.get(key, (0, -1, 0, -1))
            self.producers[key] = (meta.producer_epoch, -1, 0, offset)
        done = self.txns.complete_markers(txn_id, self.now_ms)
        assert done is not None
        self.txns.complete(done)

    def state(self, txn_id: str) -> str | None:
        meta = self.txns.get(txn_id)
        return meta.state.value if meta is not None else None

    def _injected(self, key: int) -> ErrorCode | None:
        queue = self.inject.get(key)
        return queue.pop(0) if queue else None

    def _handle(self, header: RequestHeader, body: Any) -> bytes | None:
        key, version = header.api_key, header.api_version
        handler: Callable[[RequestHeader, Any, Any], bytes | None] | None = {
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self._add_partitions,
            ApiKey.END_TXN: self._end_txn,
            ApiKey.PRODUCE: self._produce,
        }.get(ApiKey(key))
        if key == ApiKey.DESCRIBE_TRANSACTIONS:
            return self._describe(header, body)
        if handler is None:
            return super()._handle(header, body)
        return handler(header, body, _m(key, version))

    def _find_coordinator(self, header: RequestHeader, body: Any, m: Any) -> bytes:
        import datetime

        code = self._injected(ApiKey.FIND_COORDINATOR) or ErrorCode.NONE
        zero = datetime.timedelta(0)
        if header.api_version >= 4:
            return encode_response(
                header,
                m.FindCoordinatorResponse(
                    throttle_time=zero,
                    coordinators=tuple(
                        m.Coordinator(
                            key=k,
                            node_id=self.node_id,
                            host="127.0.0.1",
                            port=self.port,
                            error_code=K(code.value),
                            error_message=None,
                        )
                        for k in body.coordinator_keys
                    ),
                ),
            )
        return encode_response(
            header,
            m.FindCoordinatorResponse(
                throttle_time=zero,
                error_code=K(code.value),
                error_message=None,
                node_id=self.node_id,
                host="127.0.0.1",
                port=self.port,
            ),
        )

    def _init_producer_id(self, header: RequestHeader, body: Any, m: Any) -> bytes:
        import datetime

        txn_id = str(body.transactional_id)
        code = self._injected(ApiKey.INIT_PRODUCER_ID)
        producer_id, epoch = -1, -1
        if code is None:
            new_id = None
            if self.txns.needs_new_producer_id(txn_id):
                new_id = self.next_producer_id
                self.next_producer_id += 1
            result = self.txns.init_producer_id(
                txn_id,
                int(body.transaction_timeout.total_seconds() * 1000),
                self.now_ms,
                new_producer_id=new_id,
            )
            if isinstance(result, ErrorCode):
                code = result
            else:
                self._apply(result)
                if result.kind == TransitionKind.FENCE_ABORT:
                    code = ErrorCode.CONCURRENT_TRANSACTIONS
                else:
                    code = ErrorCode.NONE
                    producer_id, epoch = result.after.producer_id, result.after.producer_epoch
        return encode_response(
            header,
            m.InitProducerIdResponse(
                throttle_time=datetime.timedelta(0),
                error_code=K(code.value),
                producer_id=producer_id,
                producer_epoch=epoch,
            ),
        )

    def _add_partitions(self, header: RequestHeader, body: Any, m: Any) -> bytes:
        import datetime

        tps = [
            TopicPartition(t.name, int(p)) for t in body.v3_and_below_topics for p in t.partitions
        ]
        code = self._injected(ApiKey.ADD_PARTITIONS_TO_TXN)
        if code is None:
            result = self.txns.add_partitions(
                str(body.v3_and_below_transactional_id),
                int(body.v3_and_below_producer_id),
                int(body.v3_and_below_producer_epoch),
                tps,
                self.now_ms,
            )
            if isinstance(result, ErrorCode):
                code = result
            else:
                self._apply(result)
                code = ErrorCode.NONE
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return encode_response(
            header,
            m.AddPartitionsToTxnResponse(
                throttle_time=datetime.timedelta(0),
                results_by_topic_v3_and_below=tuple(
                    m.AddPartitionsToTxnTopicResult(
                        name=t,
                        results_by_partition=tuple(
                            m.AddPartitionsToTxnPartitionResult(
                                partition_index=p, partition_error_code=K(code.value)
                            )
                            for p in ps
                        ),
                    )
                    for t, ps in by_topic.items()
                ),
            ),
        )

    def _end_txn(self, header: RequestHeader, body: Any, m: Any) -> bytes:
        import datetime

        code = self._injected(ApiKey.END_TXN)
        if code is None:
            result = self.txns.end_txn(
                str(body.transactional_id),
                int(body.producer_id),
                int(body.producer_epoch),
                bool(body.committed),
                self.now_ms,
            )
            if isinstance(result, ErrorCode):
                code = result
            else:
                self._apply(result)
                code = ErrorCode.NONE
        return encode_response(
            header,
            m.EndTxnResponse(throttle_time=datetime.timedelta(0), error_code=K(code.value)),
        )

    def _describe(self, header: RequestHeader, body: Any) -> bytes:
        import datetime

        states = []
        for raw in body.transactional_ids:
            txn_id = str(raw)
            meta = self.txns.get(txn_id)
            code = self._injected(ApiKey.DESCRIBE_TRANSACTIONS)
            if code is None:
                code = ErrorCode.NONE if meta is not None else ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(meta.partitions) if meta is not None else ():
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            states.append(
                TransactionStateV0(
                    error_code=code.value,
                    transactional_id=txn_id,
                    transaction_state=meta.state.value if meta is not None else "",
                    transaction_timeout=meta.timeout_ms if meta is not None else 0,
                    transaction_start_time=meta.txn_start_ms if meta is not None else -1,
                    producer_id=meta.producer_id if meta is not None else -1,
                    producer_epoch=meta.producer_epoch if meta is not None else -1,
                    topics=tuple(
                        TopicData(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()
                    ),
                )
            )
        buf = io.BytesIO()
        buf.write(struct.pack(">ii", 0, header.correlation_id))
        buf.write(b"\x00")  # the v1 response header's tagged fields
        _write_describe(
            buf,
            DescribeTransactionsResponseV0(
                throttle_time=datetime.timedelta(0), transaction_states=tuple(states)
            ),
        )
        out = bytearray(buf.getvalue())
        struct.pack_into(">i", out, 0, len(out) - 4)
        return bytes(out)

    # --- partition ---------------------------------------------------------------------------

    def _produce(self, header: RequestHeader, body: Any, m: Any) -> bytes | None:
        import datetime

        (topic_data,) = body.topic_data
        (part,) = topic_data.partition_data
        name = topic_data.name
        _tid, log, next_offset = self.topics[name]
        batch = bytearray(part.records)
        ((pos, h),) = list(iter_batches(bytes(batch)))
        count = h.last_offset_delta + 1
        transactional = bool(h.attributes & 0x10)
        code = self._injected(ApiKey.PRODUCE) or ErrorCode.NONE
        base = -1
        if code == ErrorCode.NONE and h.producer_id >= 0:
            key = (name, h.producer_id)
            epoch, last_seq, last_count, last_offset = self.producers.get(key, (-1, -1, 0, -1))
            if h.producer_epoch < epoch:
                code = ErrorCode.INVALID_PRODUCER_EPOCH
            elif h.producer_epoch == epoch and h.base_sequence == last_seq:
                base = last_offset  # a retry: its original offset, nothing appended
            elif h.base_sequence != (last_seq + last_count if h.producer_epoch == epoch else 0):
                code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            elif transactional:
                meta = self.txns.get(str(body.transactional_id))
                ongoing = meta is not None and meta.state == TxnState.ONGOING
                if not ongoing or TopicPartition(name, 0) not in meta.partitions:
                    code = ErrorCode.INVALID_TXN_STATE
        if code == ErrorCode.NONE and base < 0:
            base = next_offset[0]
            stamp_batch(batch, pos, base, 3)
            next_offset[0] += count
            log += batch
            if h.producer_id >= 0:
                self.producers[(name, h.producer_id)] = (
                    h.producer_epoch,
                    h.base_sequence,
                    count,
                    base,
                )
            self.appended.append(
                Appended(
                    name,
                    base,
                    h.producer_id,
                    h.producer_epoch,
                    h.base_sequence,
                    count,
                    transactional,
                    body.transactional_id,
                )
            )
            self._produce_count += 1
            if self._produce_count in self.drop_after_append:
                raise ConnectionError("dropped by the test")
        return encode_response(
            header,
            m.ProduceResponse(
                responses=(
                    m.TopicProduceResponse(
                        name=name,
                        partition_responses=(
                            m.PartitionProduceResponse(
                                index=0,
                                error_code=K(code.value),
                                base_offset=base,
                                log_append_time=None,
                                log_start_offset=0,
                                record_errors=(),
                                error_message=None,
                            ),
                        ),
                    ),
                ),
                throttle_time=datetime.timedelta(0),
            ),
        )
