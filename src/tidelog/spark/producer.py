"""The sink's producer: rows buffered per partition, encoded as v2 batches
(``tidelog.protocol.batch_builder``) and produced on flush, all partitions concurrently.

Retries: ``tidelog.spark.session``, for ``retry_timeout_ms``. Writes are at-least-once;
``exactlyOnce`` uses ``tidelog.spark.transactions.TransactionalProducer``, built on this
one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from tidelog.client import BlockingClient, ClientConnectionError, ClientTimeoutError
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.batch_builder import RecordFields, encode_records
from tidelog.protocol.partitioner import partition_for_key
from tidelog.protocol.records import Compression
from tidelog.spark.compressed import frame_sink_section
from tidelog.spark.errors import ConnectorError
from tidelog.spark.option_values import SecurityProperties
from tidelog.spark.session import REFRESH_ERRORS, Backoff, RetryableError, Session, wait
from tidelog.storage.compression import DEFAULT_LEVELS, CompressionLevels

#: Produce answers that mean "written": DUPLICATE_SEQUENCE_NUMBER is a retry of a batch the
#: leader already has (an idempotent producer's; the Java producer takes it as success).
_PRODUCED: Final = frozenset({ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER})


class Producer:
    """Buffers records per partition and produces them (acks from the options) on flush.

    Partition choice follows Kafka's producer: the record's ``partition`` if given, else
    murmur2 of the key, else KIP-794's uniform sticky partitioner (``sticky``). Each flush
    sends one batch
    per partition, all partitions concurrently, and retries retriable failures (a retry
    after a timeout may duplicate: writes are at-least-once; ``exactlyOnce`` uses
    ``tidelog.spark.transactions.TransactionalProducer``, whose retries cannot).
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str,
        request_timeout_ms: int,
        acks: int,
        retry_timeout_ms: int,
        batch_records: int = 5000,
        batch_bytes: int = 512 * 1024,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        security_properties: SecurityProperties = (),
        compression: Compression = Compression.NONE,
        compression_levels: CompressionLevels = DEFAULT_LEVELS,
    ) -> None:
        self.session = Session(bootstrap, client_id, request_timeout_ms, security_properties)
        #: ``kafka.compression.type`` (and levels): the codec of every batch sent.
        self.compression = compression
        self.compression_levels = compression_levels
        self.acks = acks
        self.request_timeout_ms = request_timeout_ms
        self.retry_timeout_s = retry_timeout_ms / 1000
        self.batch_records = batch_records
        self.batch_bytes = batch_bytes
        #: Queued bytes (all partitions) that make ``send`` flush: one produce round
        #: trip (acks wait for the replicas) per this many bytes.
        self.flush_bytes = batch_bytes * 8
        self.now_ms = now_ms
        self._num_partitions: dict[str, int] = {}
        #: Rows sent one by one, not encoded yet.
        self._rows: dict[TopicPartition, list[RecordFields]] = {}
        #: Encoded records sections (and their record counts), in send order.
        self._sections: dict[TopicPartition, list[tuple[bytes, int]]] = {}
        self._pending_bytes = 0
        #: Per topic: the sticky batch rows without key or partition fill now, and the
        #: bytes already in it (``sticky``; ``arrow_encode`` keeps it column-wise).
        self.sticky_state: dict[str, tuple[int, int]] = {}
        #: Records acknowledged per partition (what a task's commit message reports).
        self.written: dict[TopicPartition, int] = {}
        #: Sent with every Produce request (the transactional producer's id).
        self.transactional_id: str | None = None

    def close(self) -> None:
        self.session.close()

    def num_partitions(self, topic: str) -> int:
        known = self._num_partitions.get(topic)
        if known is not None:
            return known

        def fetch(client: BlockingClient) -> int:
            cluster = client.metadata([topic], allow_auto_topic_creation=True)
            meta = cluster.topics.get(topic)
            if meta is None or meta.error_code in REFRESH_ERRORS or not meta.partitions:
                code = meta.error_code.name if meta else "no answer"
                raise RetryableError(f"metadata of topic {topic!r}: {code}")
            if meta.error_code != ErrorCode.NONE:
                raise ConnectorError(f"cannot write to topic {topic!r}: {meta.error_code.name}")
            return len(meta.partitions)

        count = self.session.call(
            fetch,
            what=f"metadata of topic {topic!r}",
            timeout_s=min(self.retry_timeout_s, 30.0),
            topics=[topic],
        )
        self._num_partitions[topic] = count
        return count

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        partition: int | None = None,
    ) -> None:
        n = self.num_partitions(topic)
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, n)
            else:
                size = (len(value) if value else 0) + 16
                partition = self.sticky(topic, n, size)
        elif not 0 <= partition < n:
            raise ConnectorError(
                f"a row asks for partition {partition} of topic {topic!r}, which has "
                f"partitions 0..{n - 1}"
            )
        tp = TopicPartition(topic, partition)
        rows = self._rows.setdefault(tp, [])
        rows.append((key, value, headers))
        self._pending_bytes += (len(value) if value else 0) + (len(key) if key else 0) + 24
        if len(rows) >= self.batch_records or self._pending_bytes >= self.flush_bytes:
            self.flush()

    def sticky(self, topic: str, partitions: int, size: int) -> int:
        """The partition of a row of ``size`` bytes without key or partition (KIP-794's
        uniform sticky partitioner): rows fill about ``batch_bytes`` for one partition,
        then go on to the next; a row goes where the bytes before it fall."""
        batch, used = self.sticky_state.get(topic, (0, 0))
        total = used + size
        self.sticky_state[topic] = (batch + total // self.batch_bytes, total % self.batch_bytes)
        return batch % partitions

    def send_section(self, tp: TopicPartition, section: bytes, count: int) -> None:
        """Queue ``count`` records already encoded as one batch's records section (offset
        and timestamp deltas 0.., as ``encode_records`` writes them) for ``tp``, after the
        rows sent to it before (``tidelog.spark.arrow_encode``)."""
        self._seal(tp)
        self._sections.setdefault(tp, []).append((section, count))
        self._pending_bytes += len(section)
        if self._pending_bytes >= self.flush_bytes:
            self.flush()

    def _seal(self, tp: TopicPartition) -> None:
        """Encode the rows sent to ``tp`` into records sections, cut near ``batch_bytes``
        so no batch exceeds the broker's message.max.bytes."""
        records = self._rows.pop(tp, None)
        if not records:
            return
        sections = self._sections.setdefault(tp, [])
        start = 0
        while start < len(records):
            size, end = 0, start
            while end < len(records) and (end == start or size < self.batch_bytes):
                key, value, _headers = records[end]
                size += (len(value) if value else 0) + (len(key) if key else 0) + 16
                end += 1
            sections.append((encode_records(records[start:end]), end - start))
            start = end

    def flush(self) -> None:
        for tp in list(self._rows):
            self._seal(tp)
        if not self._sections:
            return
        pending, self._sections, self._pending_bytes = self._sections, {}, 0
        now = self.now_ms()
        batches = {
            tp: [self._frame(tp, section, count, now) for section, count in sections]
            for tp, sections in pending.items()
        }
        self._before_produce(sorted(batches))
        backoff = Backoff(time.monotonic() + self.retry_timeout_s, "producing")
        while batches:
            failures = self.session.client.run(self._produce_all(batches))
            done = [tp for tp in batches if tp not in failures]
            for tp in done:
                count = sum(c for _section, c in pending[tp])
                self.written[tp] = self.written.get(tp, 0) + count
                del batches[tp]
            if not batches:
                return
            for tp, reason in failures.items():
                if reason is not None:
                    raise ConnectorError(f"producing to {tp}: {reason}")
            wait(backoff, ", ".join(sorted(str(tp) for tp in failures)))
            self.session.refresh(sorted({tp.topic for tp in batches}))

    def _frame(self, tp: TopicPartition, section: bytes, count: int, now_ms: int) -> bytes:
        """One batch of ``count`` records whose records section is ``section``, stamped
        ``now_ms`` and compressed with ``kafka.compression.type`` (a hook: the transactional
        producer stamps its producer id, epoch and sequences)."""
        return frame_sink_section(section, count, now_ms, self.compression, self.compression_levels)

    def _before_produce(self, tps: Sequence[TopicPartition]) -> None:
        """Called once per flush before anything is sent to ``tps`` (a hook: the
        transactional producer adds new partitions to its transaction)."""

    async def _produce_all(
        self, batches: Mapping[TopicPartition, list[bytes]]
    ) -> dict[TopicPartition, str | None]:
        """Produce every partition's batches (partitions concurrently, each partition's
        batches in order). Returns the failed partitions: None = retriable, else a reason.
        Partially sent partitions keep only their unsent batches in ``batches``."""
        client = self.session.client.client

        async def one(tp: TopicPartition, chunks: list[bytes]) -> str | bool | None:
            while chunks:
                try:
                    result = await client.produce(
                        tp,
                        chunks[0],
                        acks=self.acks,
                        timeout_ms=self.request_timeout_ms,
                        transactional_id=self.transactional_id,
                    )
                except (ClientConnectionError, ClientTimeoutError):
                    return None
                if result is not None and result.error_code not in _PRODUCED:
                    if result.error_code in REFRESH_ERRORS:
                        return None
                    return f"{result.error_code.name} {result.error_message or ''}".strip()
                chunks.pop(0)
            return True

        tps = list(batches)
        outcomes: list[Any] = await asyncio.gather(*(one(tp, batches[tp]) for tp in tps))
        return {tp: o for tp, o in zip(tps, outcomes, strict=True) if o is not True}
