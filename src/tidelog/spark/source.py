# ruff: noqa: N802, N803  (method names are PySpark's)
"""The ``tidelog`` Python data source: batch + streaming reads, batch + streaming writes.

Planning (partition discovery, offsets, admission control) runs in Spark's Python
process on the driver; ``read()`` and ``write()`` run on executors and open their own
connections. Only option dataclasses, schemas and offset ranges are pickled.

Offsets are Spark's Kafka JSON (``{"topic": {"0": 23}}``, next offset to read); the
latest offset of a partition is its last stable offset under ``kafka.isolation.level``
read_committed (the default), its high watermark under read_uncommitted: either way a
query never reads records that a leader failure could take back.

Writes are at-least-once; with ``exactlyOnce`` each write task writes in a Kafka
transaction of its own that the driver's ``commit`` commits (``tidelog.spark.transactions``,
docs/exactly-once.md).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tidelog.model import TopicPartition
from tidelog.spark import transactions
from tidelog.spark.admission import (
    OptionErrorStreamReader,
    admits,
    default_read_limit,
    limit_rows,
    trigger_delay,
)
from tidelog.spark.arrow_encode import send_batch
from tidelog.spark.errors import ConnectorError
from tidelog.spark.offset_reader import OffsetReader
from tidelog.spark.offsets import OffsetRange, from_json, rate_limit, split_ranges, to_json
from tidelog.spark.options import (
    ReadOptions,
    SparkOptionError,
    WriteOptions,
    parse_read_options,
    parse_write_options,
)
from tidelog.spark.producer import Producer
from tidelog.spark.progress import GroupCommitter
from tidelog.spark.read_loop import read_range, report_loss
from tidelog.spark.transactions import (
    TransactionalProducer,
    TxnHandle,
    end_transactions,
    fence_open_transactions,
    stream_scope,
    transactional_id,
)

log = logging.getLogger(__name__)

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def read_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (``headers`` only with ``includeHeaders``)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class TidelogDataSource(DataSource):
    """``spark.read(Stream).format("tidelog")`` / ``df.write(Stream).format("tidelog")``."""

    @classmethod
    def name(cls) -> str:
        return "tidelog"

    def schema(self) -> StructType:
        raw = str(self.options.get("includeheaders", "false")).strip().lower()
        return read_schema(raw == "true")

    def reader(self, schema: StructType) -> DataSourceReader:
        return TidelogBatchReader(parse_read_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            options = parse_read_options(self.options, streaming=True)
        except SparkOptionError as exc:
            # PySpark's stream runner loses an error raised here (UnboundLocalError in its
            # cleanup): the reader raises it from its first call instead.
            return OptionErrorStreamReader(exc)
        return TidelogStreamReader(options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise SparkOptionError(
                "save mode 'overwrite' is not supported by tidelog (a log is appended to): "
                "use mode 'append'"
            )
        options = parse_write_options(self.options)
        check_write_schema(schema, options)
        return TidelogBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        options = parse_write_options(self.options)
        check_write_schema(schema, options)
        return TidelogStreamWriter(options)


# --- reading -----------------------------------------------------------------------------


class RangePartition(InputPartition):
    """``[from_offset, until_offset)`` of one partition: one Spark task (plain values)."""

    def __init__(self, topic: str, partition: int, from_offset: int, until_offset: int) -> None:
        super().__init__(None)
        self.topic = topic
        self.partition = partition
        self.from_offset = from_offset
        self.until_offset = until_offset


def _input_partitions(ranges: list[OffsetRange], options: ReadOptions) -> list[RangePartition]:
    return [
        RangePartition(r.tp.topic, r.tp.partition, r.from_offset, r.until_offset)
        for r in split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    ]


def _read(
    options: ReadOptions, schema: StructType, partition: InputPartition
) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition):
        # PySpark plans one InputPartition(None) when partitions() returns none (every
        # range empty, e.g. a start at latest by startingOffsetsByTimestampStrategy).
        return iter(())
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    return limit_rows(
        read_range(
            options,
            TopicPartition(partition.topic, partition.partition),
            partition.from_offset,
            partition.until_offset,
            arrow_schema,
        ),
        options.max_poll_records,
    )


class TidelogBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        offsets = OffsetReader(self.options)
        try:
            tps = offsets.partitions()
            start = offsets.resolve(self.options.starting, tps, default_latest=False)
            end = offsets.resolve(self.options.ending, tps, default_latest=True, side="ending")
            latest = offsets.latest(tps)
        finally:
            offsets.close()
        ranges = []
        latest_name = "last stable offset" if self.options.read_committed else "high watermark"
        for tp in tps:
            until = end[tp]
            if until > latest[tp]:
                log.warning(
                    "endingOffsets of %s is %d, past its %s %d: reading to %d",
                    tp,
                    until,
                    latest_name,
                    latest[tp],
                    latest[tp],
                )
                until = latest[tp]
            if until < start[tp]:
                raise SparkOptionError(
                    f"the starting offset of {tp} ({start[tp]}) is after its ending offset "
                    f"({until})"
                )
            ranges.append(OffsetRange(tp, start[tp], until))
        return list(_input_partitions(ranges, self.options))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, self.schema, partition)


class TidelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with admission control and ``Trigger.AvailableNow``."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._offsets: OffsetReader | None = None
        #: AvailableNow: the latest offsets (LSO or HW) when the query started; never read
        #: past them.
        self._target: dict[TopicPartition, int] | None = None
        self._latest: dict[TopicPartition, int] | None = None
        #: commitOffsetsToGroup: commits each finished micro-batch's end offsets
        #: (``tidelog.spark.progress`` rules 3-6).
        self._group = (
            GroupCommitter(options.commit_group, options.request_timeout_ms)
            if options.commit_group is not None
            else None
        )
        self._delay = trigger_delay(options)

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the reader pickled for read(): no client travels with it.
        state = dict(self.__dict__)
        state["_offsets"] = None
        return state

    @property
    def offsets(self) -> OffsetReader:
        if self._offsets is None:
            self._offsets = OffsetReader(self.options)
        return self._offsets

    def initialOffset(self) -> dict[str, Any]:
        tps = self.offsets.partitions()
        return to_json(self.offsets.resolve(self.options.starting, tps, default_latest=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        return default_read_limit(self.options)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.offsets.latest(self.offsets.partitions())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = from_json(start)
        self._commit_to_group(begin)  # the micro-batch before has finished (progress rule 4)
        tps = self.offsets.partitions()
        gone = sorted(set(begin) - set(tps))
        if gone:
            # Look again before calling it loss: a restarting broker may briefly not
            # know a topic. Gone partitions keep their offsets (carried into the end
            # offsets), so one that comes back is not read again from the start.
            time.sleep(1.0)
            tps = self.offsets.partitions()
            gone = sorted(set(begin) - set(tps))
            if gone:
                report_loss(
                    self.options,
                    "partitions " + ", ".join(map(str, gone)) + " no longer exist",
                )
        if self._target is not None:
            tps = [tp for tp in tps if tp in self._target or tp in begin]
        latest = self.offsets.latest(tps)
        if self._target is not None:
            latest = {tp: min(o, self._target.get(tp, o)) for tp, o in latest.items()}
        new = [tp for tp in tps if tp not in begin]
        if new:
            # Spark's Kafka rule: partitions that appear while the query runs start at
            # their earliest offset.
            begin.update(self.offsets.earliest(new))
        for tp in tps:
            if latest[tp] < begin[tp]:
                if self.offsets.truncated_below(tp, begin[tp]):
                    report_loss(
                        self.options,
                        f"{tp}: the log ends at {latest[tp]}, below the offset {begin[tp]} "
                        "the query had reached (records were taken back)",
                    )
                    # Go on from the new end: what is appended there is new data.
                else:
                    # A restarted broker's stale HW (or, read_committed, an LSO behind what
                    # a read_uncommitted run of this query reached): hold still.
                    latest[tp] = begin[tp]
        self._latest = latest
        end = latest
        if not admits(self._delay, limit, self._target, begin, latest):
            end = {tp: begin[tp] for tp in latest}  # minOffsetsPerTrigger: wait for more
        elif isinstance(limit, ReadMaxRows):
            end = rate_limit({tp: begin[tp] for tp in latest}, latest, limit.max_rows)
        return to_json({**{tp: begin[tp] for tp in gone}, **end})

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = from_json(start)
        until = from_json(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(self.offsets.earliest(new))
        ranges = [
            OffsetRange(tp, begin[tp], until[tp]) for tp in sorted(until) if until[tp] > begin[tp]
        ]
        return _input_partitions(ranges, self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, self.schema, partition)

    def commit(self, end: dict[str, Any]) -> None:
        # Nothing to release: offsets live in Spark's checkpoint. commitOffsetsToGroup: the
        # group gets them too (mostly done already by latestOffset, progress rule 4).
        self._commit_to_group(from_json(end))

    def _commit_to_group(self, offsets: dict[TopicPartition, int]) -> None:
        if self._group is not None:
            self._group.commit(offsets, self.offsets.session)

    def stop(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None


# --- writing -----------------------------------------------------------------------------

_KEY_TYPES = (BinaryType, StringType)


def check_write_schema(schema: StructType, options: WriteOptions) -> None:
    """Spark's Kafka sink rules: ``value`` required (string or binary); ``key`` (string or
    binary), ``topic`` (string), ``partition`` (int) and ``headers`` optional; ``topic``
    column or option required."""
    types: dict[str, DataType] = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise SparkOptionError(
            "the data to write has no 'value' column (required: string or binary); "
            f"columns: {', '.join(schema.fieldNames())}"
        )
    for name in ("value", "key"):
        if name in types and not isinstance(types[name], _KEY_TYPES):
            raise SparkOptionError(
                f"column '{name}' must be string or binary, not {types[name].simpleString()}"
            )
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise SparkOptionError(
            f"column 'topic' must be a string, not {types['topic'].simpleString()}"
        )
    if "topic" not in types and options.topic is None:
        raise SparkOptionError(
            "no topic to write to: set the option 'topic' or add a 'topic' column"
        )
    if "partition" in types and not isinstance(types["partition"], (IntegerType, LongType)):
        raise SparkOptionError(
            f"column 'partition' must be an int, not {types['partition'].simpleString()}"
        )
    if "headers" in types and types["headers"].simpleString() != HEADERS_TYPE.simpleString():
        raise SparkOptionError(
            f"column 'headers' must be {HEADERS_TYPE.simpleString()}, not "
            f"{types['headers'].simpleString()}"
        )


@dataclass
class TidelogCommitMessage(WriterCommitMessage):
    """What one write task acknowledged: records per ``topic-partition``; with
    ``exactlyOnce`` also its transaction, which the driver ends."""

    written: dict[str, int] = field(default_factory=dict)
    #: exactlyOnce: the task's open transaction (None: it opened none, having no rows or
    #: finding its transaction committed by an earlier run of the micro-batch).
    transaction: TxnHandle | None = None
    #: exactlyOnce: the task's transactional id without ``-<partition>``
    #: (``<prefix>-<query id>-<batch id>``, or ``<prefix>-batch-<uuid>`` for a batch write).
    scope: str | None = None
    #: exactlyOnce: an earlier run of this micro-batch committed the task's transaction; the
    #: task wrote nothing.
    already_committed: bool = False

    @property
    def total(self) -> int:
        return sum(self.written.values())


def _as_bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)  # type: ignore[call-overload, no-any-return]


def _column(batch: pa.RecordBatch, name: str) -> list[Any]:
    for i, column_name in enumerate(batch.schema.names):
        if column_name.lower() == name:
            return list(batch.column(i).to_pylist())
    return [None] * batch.num_rows


def _send_rows(producer: Producer, options: WriteOptions, batch: pa.RecordBatch) -> None:
    if send_batch(producer, options, batch):
        return  # encoded column-wise (the common case)
    n = batch.num_rows
    values = _column(batch, "value")
    keys = _column(batch, "key")
    topics = _column(batch, "topic")
    partitions = _column(batch, "partition")
    headers = _column(batch, "headers")
    for i in range(n):
        topic = topics[i] or options.topic
        if topic is None:
            raise SparkOptionError("a row has a null 'topic' and no option 'topic' is set")
        row_headers = headers[i] or ()
        producer.send(
            topic,
            _as_bytes(values[i]),
            _as_bytes(keys[i]),
            [(h["key"], _as_bytes(h["value"])) for h in row_headers],
            partitions[i],
        )


def _write_batches(
    options: WriteOptions, batches: Iterator[pa.RecordBatch]
) -> TidelogCommitMessage:
    producer = Producer(
        options.bootstrap_servers,
        client_id=options.client_id,
        request_timeout_ms=options.request_timeout_ms,
        acks=options.acks,
        retry_timeout_ms=options.retry_timeout_ms,
        batch_bytes=options.batch_bytes,
        security_properties=options.security_properties,
        compression=options.compression,
        compression_levels=options.compression_levels,
    )
    try:
        for batch in batches:
            _send_rows(producer, options, batch)
        producer.flush()
        return TidelogCommitMessage({str(tp): c for tp, c in producer.written.items()})
    finally:
        producer.close()


def _write_in_transaction(
    options: WriteOptions, scope: str, partition: int, batches: Iterator[pa.RecordBatch]
) -> TidelogCommitMessage:
    """exactlyOnce: write task ``partition``'s rows in its own transaction, left open for
    the driver (``tidelog.spark.transactions``, rules 2-4)."""
    first = next((b for b in batches if b.num_rows), None)
    if first is None:
        return TidelogCommitMessage(scope=scope)  # no rows: no transaction
    txn_id = transactional_id(scope, partition)
    producer = TransactionalProducer(options, txn_id)
    try:
        if not producer.begin():
            skipped = first.num_rows + sum(b.num_rows for b in batches)
            log.warning(
                "transaction %s was committed by an earlier run of this micro-batch "
                "(state %s): not writing its %d rows again",
                txn_id,
                producer.previous_state,
                skipped,
            )
            return TidelogCommitMessage(scope=scope, already_committed=True)
        _send_rows(producer, options, first)
        for batch in batches:
            _send_rows(producer, options, batch)
        producer.flush()
        return TidelogCommitMessage(
            {str(tp): c for tp, c in producer.written.items()},
            transaction=producer.handle,
            scope=scope,
        )
    finally:
        producer.close()


#: Local properties Spark sets on the tasks of a streaming micro-batch.
_QUERY_ID_PROPERTY = "sql.streaming.queryId"
_BATCH_ID_PROPERTY = "streaming.sql.batchId"


def _stream_task(prefix: str) -> tuple[str, int]:
    """exactlyOnce, in a write task: (scope, partition) from the task's context."""
    ctx = TaskContext.get()
    query_id = ctx.getLocalProperty(_QUERY_ID_PROPERTY) if ctx is not None else None
    batch_id = ctx.getLocalProperty(_BATCH_ID_PROPERTY) if ctx is not None else None
    if ctx is None or not query_id or batch_id is None:
        raise ConnectorError(
            "exactlyOnce: the write task does not know its streaming query and micro-batch "
            f"(Spark's task properties {_QUERY_ID_PROPERTY!r}, {_BATCH_ID_PROPERTY!r} are "
            "not set)"
        )
    return stream_scope(prefix, query_id, int(batch_id)), ctx.partitionId()


def _handles(messages: Sequence[WriterCommitMessage | None]) -> list[TxnHandle]:
    return [
        m.transaction
        for m in messages
        if isinstance(m, TidelogCommitMessage) and m.transaction is not None
    ]


def _commit_transactions(
    options: WriteOptions, messages: Sequence[WriterCommitMessage | None], what: str
) -> None:
    """exactlyOnce, on the driver: commit every task's transaction; raise if any did not
    commit (Spark then aborts and fails the query; a restart replays the batch, and the
    tasks whose transactions did commit write nothing again)."""
    handles = _handles(messages)
    outcomes = end_transactions(options, handles, commit=True)
    failed = {t: why for t, why in outcomes.items() if why is not None}
    skipped = sum(
        1 for m in messages if isinstance(m, TidelogCommitMessage) and m.already_committed
    )
    total = sum(m.total for m in messages if isinstance(m, TidelogCommitMessage))
    if failed:
        raise ConnectorError(
            f"{what}: {len(failed)} of {len(handles)} transactions did not commit ("
            + "; ".join(f"{t}: {why}" for t, why in sorted(failed.items()))
            + "). The records of those are not visible to read_committed readers; "
            "restart the query from its checkpoint to write them again (the committed "
            "ones are not written twice). PRODUCER_FENCED means the transaction was aborted "
            "first: by its timeout (raise 'kafka.transaction.timeout.ms' above the longest "
            "micro-batch) or by another attempt of the same task"
        )
    log.info(
        "%s committed: %d transactions, %d records%s",
        what,
        len(handles),
        total,
        f"; {skipped} tasks had been committed by an earlier run" if skipped else "",
    )


def _abort_transactions(
    options: WriteOptions,
    messages: Sequence[WriterCommitMessage | None],
    what: str,
    scope: str | None = None,
) -> None:
    """exactlyOnce, on the driver: abort the transactions of the tasks that finished, and
    the open transaction of each task that failed (message None, at its partition's index),
    so read_committed readers of the sink need not wait for their timeout."""
    outcomes = end_transactions(options, _handles(messages), commit=False)
    for txn_id, why in sorted(outcomes.items()):
        if why is not None:
            # INVALID_TXN_STATE: it had been committed (a commit that failed part way).
            log.warning("%s: transaction %s not aborted: %s", what, txn_id, why)
    scopes = {m.scope for m in messages if isinstance(m, TidelogCommitMessage) and m.scope}
    if scope is None and len(scopes) == 1:
        (scope,) = scopes
    failed = (
        [transactional_id(scope, i) for i, m in enumerate(messages) if m is None]
        if scope is not None
        else []
    )
    fenced: list[str] = []
    if failed:
        fenced = fence_open_transactions(options, failed)
        if fenced:
            log.warning("%s: aborted the open transactions of failed tasks: %s", what, fenced)
        # Spark does not wait for the job's other attempts to stop: fence again once a
        # killed attempt's Python worker is gone, in case one began meanwhile.
        time.sleep(transactions.ZOMBIE_GRACE_S)
        late = fence_open_transactions(options, failed)
        if late:
            log.warning(
                "%s: aborted transactions that failed tasks opened after the abort began: %s",
                what,
                late,
            )
        fenced += late
    aborted = sum(1 for why in outcomes.values() if why is None) + len(fenced)
    log.error(
        "%s aborted: %d of %d write tasks failed; %d transactions aborted (their records "
        "stay invisible to read_committed readers)",
        what,
        sum(1 for m in messages if m is None),
        len(messages),
        aborted,
    )


def _log_abort(messages: Sequence[WriterCommitMessage | None], what: str) -> None:
    failed = sum(1 for m in messages if m is None)
    written = sum(m.total for m in messages if isinstance(m, TidelogCommitMessage))
    log.error(
        "%s aborted: %d of %d write tasks failed; %d records the other tasks wrote stay in "
        "the log (writes are at-least-once)",
        what,
        failed,
        len(messages),
        written,
    )


class TidelogBatchWriter(DataSourceArrowWriter):
    """Batch writes; with ``exactlyOnce`` all or nothing: each task writes in a transaction
    ``<prefix>-batch-<uuid>-<partition>`` (the uuid drawn on the driver, once per write)
    and ``commit`` commits them all (a rerun of the job writes again)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.scope = (
            f"{options.transactional_id_prefix}-batch-{uuid.uuid4()}"
            if options.exactly_once
            else None
        )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.scope is None:
            return _write_batches(self.options, iterator)
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        return _write_in_transaction(self.options, self.scope, partition, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.scope is not None:
            _commit_transactions(self.options, messages, "batch write")
            return
        total = sum(m.total for m in messages if isinstance(m, TidelogCommitMessage))
        log.info("batch write committed: %d records", total)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.scope is not None:
            _abort_transactions(self.options, messages, "batch write", self.scope)
            return
        _log_abort(messages, "batch write")


class TidelogStreamWriter(DataSourceStreamArrowWriter):
    """Streaming writes: at-least-once, or with ``exactlyOnce`` one transaction per write
    task and micro-batch, committed by ``commit`` (``tidelog.spark.transactions``)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if not self.options.exactly_once:
            return _write_batches(self.options, iterator)
        scope, partition = _stream_task(self.options.transactional_id_prefix)
        return _write_in_transaction(self.options, scope, partition, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if not self.options.exactly_once:
            return  # records were acknowledged (acks=all) when the tasks returned
        scopes = {m.scope for m in messages if isinstance(m, TidelogCommitMessage) and m.scope}
        wrong = sorted(s for s in scopes if not s.endswith(f"-{batchId}"))
        if wrong:
            raise ConnectorError(
                f"micro-batch {batchId}: commit messages of other micro-batches: {wrong}"
            )
        _commit_transactions(self.options, messages, f"micro-batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.exactly_once:
            _abort_transactions(self.options, messages, f"micro-batch {batchId}")
            return
        _log_abort(messages, f"micro-batch {batchId}")
