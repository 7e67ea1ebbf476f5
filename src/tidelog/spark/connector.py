"""The connector's IO: offsets on the driver, fetching on executors, producing for writes.

No Spark here (pyarrow only), so all of it runs in plain tests too. Every object holds a
``BlockingClient`` opened on first use and is never pickled: Spark ships plain option
values and offset ranges, and each executor task opens its own connection. Security
(TLS, SASL) travels the same way, as the options' ``security_properties`` strings; every
client is built with the ``ClientSecurity`` they give (``options.client_security``).

Failures: retriable broker errors (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, fenced or
unknown epochs, ...) and lost connections refresh the metadata, back off (100 ms doubling
to 2 s) and retry until a deadline (``kafkaConsumer.pollTimeoutMs`` for reads); anything
else, or the deadline, raises ``ConnectorError`` naming the partition. Offsets that went
away (retention, DeleteRecords, an unclean election) raise ``DataLossError`` when
``failOnDataLoss`` is true; otherwise the reader logs a warning and skips them.

Transactions (KIP-98, ``kafka.isolation.level``): read_committed (the default) asks the
brokers for the last stable offset (LSO) where read_uncommitted asks for the high watermark,
and drops the records of aborted transactions; both drop control batches (transaction
markers), which take offsets but are never rows.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar

import cramjam
import crc32c
import pyarrow as pa

from tidelog.client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    BlockingClient,
    ClientConnectionError,
    ClientTimeoutError,
    FetchRequestPartition,
)
from tidelog.errors import ErrorCode, TidelogError
from tidelog.model import TopicPartition
from tidelog.protocol.records import (
    BATCH_HEADER_SIZE,
    CRC_START,
    Compression,
    CorruptRecordBatchError,
    read_batch_size,
)
from tidelog.spark.options import (
    Assign,
    EarliestSpec,
    LatestSpec,
    OffsetSpec,
    ReadOptions,
    SecurityProperties,
    SpecificSpec,
    Subscribe,
    Subscription,
    TimestampSpec,
    client_security,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

_BACKOFF_START_S: Final = 0.1
_BACKOFF_MAX_S: Final = 2.0
#: Errors after which a metadata refresh and a retry may succeed.
_REFRESH_ERRORS: Final = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.OFFSET_NOT_AVAILABLE,
    }
)
#: How long a high watermark below the planned end is waited out before it counts as loss
#: (a restarted broker may serve a checkpointed, slightly stale HW until the next append).
_HW_GRACE_S: Final = 10.0


class ConnectorError(TidelogError):
    """The connector gave up: a non-retriable error, or retries ran past their deadline."""


class DataLossError(ConnectorError):
    """Offsets the query planned to read are gone (and ``failOnDataLoss`` is true)."""


class _RetryableError(Exception):
    """Internal: a failure worth retrying after a metadata refresh."""


class Backoff:
    """Exponential backoff (100 ms doubling to 2 s) until a deadline."""

    def __init__(self, timeout_s: float, what: str) -> None:
        self.deadline = time.monotonic() + timeout_s
        self.delay = _BACKOFF_START_S
        self.what = what
        self.attempts = 0

    def wait(self, reason: object) -> None:
        self.attempts += 1
        if time.monotonic() + self.delay > self.deadline:
            raise ConnectorError(
                f"{self.what}: gave up after {self.attempts} attempts; last error: {reason}"
            )
        log.info("%s: retrying in %.1fs after %s", self.what, self.delay, reason)
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, _BACKOFF_MAX_S)

    def reset(self) -> None:
        self.delay = _BACKOFF_START_S


class _Session:
    """A lazily opened ``BlockingClient`` with retry-with-refresh around calls."""

    def __init__(
        self,
        bootstrap: str,
        client_id: str,
        request_timeout_ms: int,
        security_properties: SecurityProperties = (),
    ) -> None:
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        #: The client's ``kafka.security.*``/``sasl.*``/``ssl.*`` properties (plain strings:
        #: the ``ClientSecurity`` and its SSLContext are built here, on this process).
        self.security_properties = security_properties
        self._client: BlockingClient | None = None

    @property
    def client(self) -> BlockingClient:
        if self._client is None:
            security = client_security(self.security_properties)
            self._client = BlockingClient(
                self.bootstrap,
                client_id=self.client_id,
                request_timeout_s=self.request_timeout_s,
                connect_timeout_s=min(10.0, self.request_timeout_s),
                security=security,
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            try:
                client.close()
            except Exception:  # closing after a broken connection must not mask the cause
                log.debug("closing the client failed", exc_info=True)

    def refresh(self, topics: Sequence[str] | None) -> None:
        try:
            self.client.metadata(topics)
        except (ClientConnectionError, ClientTimeoutError) as exc:
            log.info("metadata refresh failed: %s", exc)

    def call(
        self,
        fn: Callable[[BlockingClient], T],
        *,
        what: str,
        timeout_s: float,
        topics: Sequence[str] | None = None,
    ) -> T:
        """``fn(client)``, retried on connection errors and ``_RetryableError`` until the
        deadline, with a metadata refresh before each retry."""
        backoff = Backoff(timeout_s, what)
        while True:
            try:
                return fn(self.client)
            except (ClientConnectionError, ClientTimeoutError, _RetryableError) as exc:
                backoff.wait(exc)
                self.refresh(topics)


# --- driver: offsets ---------------------------------------------------------------------


class OffsetReader:
    """Partition discovery and offset look-ups, for the driver."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.session = _Session(
            options.bootstrap_servers,
            options.client_id,
            options.request_timeout_ms,
            options.security_properties,
        )
        self.timeout_s = options.poll_timeout_ms / 1000
        self.isolation_level = READ_COMMITTED if options.read_committed else READ_UNCOMMITTED

    def close(self) -> None:
        self.session.close()

    def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription covers now (topics that do not exist: none)."""
        subscription: Subscription = self.options.subscription
        if isinstance(subscription, Assign):
            return sorted(subscription.partitions)
        topics = list(subscription.topics) if isinstance(subscription, Subscribe) else None

        def fetch(client: BlockingClient) -> list[TopicPartition]:
            cluster = client.metadata(topics)
            found: list[TopicPartition] = []
            for name, topic in cluster.topics.items():
                if isinstance(subscription, Subscribe) and name not in subscription.topics:
                    continue
                if not isinstance(subscription, Subscribe) and not subscription.matches(name):
                    continue
                if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    continue
                if topic.error_code == ErrorCode.LEADER_NOT_AVAILABLE:
                    raise _RetryableError(f"topic {name}: {topic.error_code.name}")
                if topic.error_code != ErrorCode.NONE:
                    raise ConnectorError(f"metadata of topic {name}: {topic.error_code.name}")
                found.extend(TopicPartition(name, p) for p in topic.partitions)
            return sorted(found)

        return self.session.call(fetch, what="partition discovery", timeout_s=self.timeout_s)

    def list_offsets(
        self, tps: Sequence[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        """ListOffsets for ``timestamp`` (-2 earliest, -1 latest), asked with the query's
        isolation level as a consumer would: latest is the high watermark for
        read_uncommitted, the last stable offset for read_committed (and a timestamp look-up
        finds no offset at or past it)."""
        if not tps:
            return {}
        topics = sorted({tp.topic for tp in tps})

        def fetch(client: BlockingClient) -> dict[TopicPartition, int]:
            results = client.list_offsets(
                dict.fromkeys(tps, timestamp), isolation_level=self.isolation_level
            )
            out = {}
            for tp in tps:
                result = results.get(tp)
                if result is None:
                    raise _RetryableError(f"{tp}: no answer")
                if result.error_code in _REFRESH_ERRORS:
                    raise _RetryableError(f"{tp}: {result.error_code.name}")
                if result.error_code != ErrorCode.NONE:
                    raise ConnectorError(f"ListOffsets for {tp}: {result.error_code.name}")
                out[tp] = result.offset
            return out

        return self.session.call(
            fetch, what=f"offsets of {', '.join(topics)}", timeout_s=self.timeout_s, topics=topics
        )

    def earliest(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets(tps, EARLIEST_TIMESTAMP)

    def latest(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets(tps, LATEST_TIMESTAMP)

    def resolve(
        self, spec: OffsetSpec, tps: Sequence[TopicPartition], *, default_latest: bool
    ) -> dict[TopicPartition, int]:
        """Concrete offsets for a ``startingOffsets``/``endingOffsets`` spec."""
        if isinstance(spec, EarliestSpec):
            return self.earliest(tps)
        if isinstance(spec, LatestSpec):
            return self.latest(tps)
        if isinstance(spec, TimestampSpec):
            found = self.list_offsets(tps, spec.timestamp_ms)
            missing = [tp for tp, o in found.items() if o < 0]
            # No record at or after the timestamp: start at the end (Spark's "latest").
            found.update(self.latest(missing))
            return found
        assert isinstance(spec, SpecificSpec)
        wanted: dict[TopicPartition, int] = {}
        for tp in tps:
            given = spec.offsets.get(tp.topic, {}).get(tp.partition)
            wanted[tp] = given if given is not None else (-1 if default_latest else -2)
        earliest_needed = [tp for tp, o in wanted.items() if o == -2]
        latest_needed = [tp for tp, o in wanted.items() if o == -1]
        wanted.update(self.earliest(earliest_needed))
        wanted.update(self.latest(latest_needed))
        return wanted

    def truncated_below(self, tp: TopicPartition, offset: int) -> bool:
        """True if the log of ``tp`` now ends below ``offset`` (an unclean election or a
        recreated topic took records back); False if ``offset`` is still in the log."""

        def fetch(client: BlockingClient) -> bool:
            results = client.fetch(
                {tp: FetchRequestPartition(offset, partition_max_bytes=1)}, max_wait_ms=0
            )
            result = results.get(tp)
            if result is None or result.error_code in _REFRESH_ERRORS:
                raise _RetryableError(f"{tp}: {result.error_code.name if result else 'no answer'}")
            return result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE

        return self.session.call(
            fetch, what=f"log end check of {tp}", timeout_s=self.timeout_s, topics=[tp.topic]
        )


# --- executors: fetching into Arrow ------------------------------------------------------

_BATCH_HEAD: Final = struct.Struct(">qiibIhiqqqhii")
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"


def _decompress(codec: int, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == Compression.SNAPPY:
        if data.startswith(_XERIAL_MAGIC):
            out, pos = [], 16
            while pos < len(data):
                (size,) = struct.unpack_from(">i", data, pos)
                out.append(bytes(cramjam.snappy.decompress_raw(data[pos + 4 : pos + 4 + size])))
                pos += 4 + size
            return b"".join(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise CorruptRecordBatchError(f"unknown compression codec {codec}")


class Columns:
    """Column lists of decoded records (Spark's Kafka schema), ready for Arrow."""

    __slots__ = ("headers", "keys", "offsets", "timestamp_types", "timestamps_us", "values")

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps_us: list[int] = []
        self.timestamp_types: list[int] = []
        self.headers: list[list[tuple[str, bytes | None]]] = []

    def __len__(self) -> int:
        return len(self.offsets)


_CONTROL_KEY: Final = struct.Struct(">hh")
#: Control record types (the key's second int16): the transaction markers.
_ABORT_MARKER: Final = 0


def _is_abort_marker(data: bytes, count: int) -> bool:
    """Whether a control batch's records (``data``, decompressed) start with an ABORT
    marker: key = int16 version, int16 type (0 abort, 1 commit)."""
    if count < 1:
        return False
    _length, p = _varint_slow(data, 0)
    p += 1  # record attributes
    _ts_delta, p = _varint_slow(data, p)
    _off_delta, p = _varint_slow(data, p)
    key_length, p = _varint_slow(data, p)
    if key_length < _CONTROL_KEY.size or p + key_length > len(data):
        raise CorruptRecordBatchError(f"control record key of {key_length} bytes")
    _version, kind = _CONTROL_KEY.unpack_from(data, p)
    return bool(kind == _ABORT_MARKER)


class TransactionFilter:
    """Decides which transactional and control batches of one fetch response give no rows
    (KIP-98, the Java consumer's rules).

    Control batches (transaction markers) are always dropped. Under read_committed
    (``aborted_transactions`` not None: the response's (producer id, first offset) list),
    the aborted transactions are taken in first-offset order: once a batch's last offset
    reaches an entry's first offset, that producer is in an aborted transaction, and its
    transactional data batches are dropped until its ABORT marker (a COMMIT marker ends
    nothing). Batches that are neither transactional nor control never get here: they are
    always kept.
    """

    __slots__ = ("_aborted", "_pending", "read_committed")

    def __init__(self, aborted_transactions: Sequence[tuple[int, int]] | None) -> None:
        self.read_committed = aborted_transactions is not None
        #: Not reached yet, latest first offset first (taken from the end).
        self._pending = sorted(aborted_transactions or (), key=lambda a: a[1], reverse=True)
        #: Producers inside an aborted transaction.
        self._aborted: set[int] = set()

    def skips(self, buf: bytes, pos: int, end: int) -> bool:
        """Whether the transactional or control batch ``buf[pos:end]`` is dropped (called
        for each such batch of the response, in log order)."""
        (base_offset, _, _, _, _, attributes, last_delta, _, _, producer_id, _, _, count) = (
            _BATCH_HEAD.unpack_from(buf, pos)
        )
        if not self.read_committed:
            return bool(attributes & 0x20)
        pending = self._pending
        last_offset = base_offset + last_delta
        while pending and pending[-1][1] <= last_offset:
            self._aborted.add(pending.pop()[0])
        if producer_id not in self._aborted:
            return bool(attributes & 0x20)
        if attributes & 0x20 and _is_abort_marker(
            _decompress(attributes & 0x07, buf[pos + BATCH_HEADER_SIZE : end]), count
        ):
            self._aborted.discard(producer_id)
        return True


def decode_into(
    buf: bytes,
    columns: Columns,
    *,
    from_offset: int,
    until_offset: int,
    include_headers: bool,
    aborted_transactions: Sequence[tuple[int, int]] | None = None,
) -> int:
    """Decode the whole v2 batches of a Fetch response into ``columns``, keeping records in
    ``[from_offset, until_offset)``. Returns the offset after the last whole batch seen
    (``from_offset`` when there was none): the next fetch offset.

    Control batches (transaction markers) are not rows. ``aborted_transactions`` is None
    for read_uncommitted (transactional records are kept whatever became of their
    transaction); for read_committed it is the fetch response's (producer id, first offset)
    list, and the records of those aborted transactions are dropped (``TransactionFilter``).
    Dropped batches still move the returned offset past them.

    A column-wise decoder (no per-record objects); the record layout is documented in
    ``tidelog.client.records``. A truncated last batch (cut at max_bytes) is ignored.
    """
    next_offset = from_offset
    txn = TransactionFilter(aborted_transactions)
    pos = 0
    n = len(buf)
    keys, values, offsets = columns.keys, columns.values, columns.offsets
    timestamps, types, headers_col = columns.timestamps_us, columns.timestamp_types, columns.headers
    while True:
        size = read_batch_size(buf, pos)
        if size is None or pos + size > n or size < BATCH_HEADER_SIZE:
            break
        (
            base_offset,
            _length,
            _epoch,
            magic,
            crc,
            attributes,
            last_delta,
            base_ts,
            max_ts,
            _pid,
            _pepoch,
            _seq,
            count,
        ) = _BATCH_HEAD.unpack_from(buf, pos)
        if magic != 2:
            raise CorruptRecordBatchError(f"batch at offset {base_offset} has magic {magic}")
        if base_offset >= until_offset:
            break
        if crc32c.crc32c(memoryview(buf)[pos + CRC_START : pos + size]) != crc:
            raise CorruptRecordBatchError(f"batch at offset {base_offset} fails its CRC-32C")
        batch_end_offset = base_offset + last_delta + 1
        start_pos, pos = pos, pos + size
        # One attribute test for plain batches; transactional (0x10) and control (0x20)
        # ones go through the transaction state, in log order.
        if (attributes & 0x30 and txn.skips(buf, start_pos, pos)) or (
            batch_end_offset <= from_offset
        ):
            next_offset = max(next_offset, batch_end_offset)
            continue
        next_offset = max(next_offset, batch_end_offset)
        data = _decompress(attributes & 0x07, buf[start_pos + BATCH_HEADER_SIZE : pos])
        log_append = (attributes >> 3) & 1
        p = 0
        for _ in range(count):
            # length varint (skipped: fields are parsed one by one)
            while data[p] & 0x80:
                p += 1
            p += 2  # last length byte + attributes
            # timestampDelta varlong
            b = data[p]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                ts_delta, p = _varint_slow(data, p)
            # offsetDelta varint
            b = data[p]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                off_delta, p = _varint_slow(data, p)
            # key
            b = data[p]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                klen, p = _varint_slow(data, p)
            if klen < 0:
                key = None
            else:
                key = data[p : p + klen]
                p += klen
            b = data[p]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                vlen, p = _varint_slow(data, p)
            if vlen < 0:
                value = None
            else:
                value = data[p : p + vlen]
                p += vlen
            b = data[p]
            if b < 0x80:
                hcount = (b >> 1) ^ -(b & 1)
                p += 1
            else:
                hcount, p = _varint_slow(data, p)
            record_headers: list[tuple[str, bytes | None]] = []
            for _h in range(hcount):
                hklen, p = _varint_slow(data, p)
                hkey = data[p : p + hklen].decode(errors="replace")
                p += hklen
                hvlen, p = _varint_slow(data, p)
                if hvlen < 0:
                    hval = None
                else:
                    hval = data[p : p + hvlen]
                    p += hvlen
                record_headers.append((hkey, hval))
            offset = base_offset + off_delta
            if offset < from_offset or offset >= until_offset:
                continue
            keys.append(key)
            values.append(value)
            offsets.append(offset)
            timestamps.append((max_ts if log_append else base_ts + ts_delta) * 1000)
            types.append(log_append)
            if include_headers:
                headers_col.append(record_headers)
    return next_offset


def _varint_slow(data: bytes, p: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        b = data[p]
        p += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return (value >> 1) ^ -(value & 1), p
        shift += 7
        if shift > 63:
            raise CorruptRecordBatchError("record varint is too long")


def to_record_batch(
    columns: Columns, tp: TopicPartition, schema: pa.Schema, *, include_headers: bool
) -> pa.RecordBatch:
    n = len(columns)
    arrays = [
        pa.array(columns.keys, pa.binary()),
        pa.array(columns.values, pa.binary()),
        pa.array([tp.topic] * n, pa.string()),
        pa.array([tp.partition] * n, pa.int32()),
        pa.array(columns.offsets, pa.int64()),
        pa.array(columns.timestamps_us, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array(columns.timestamp_types, pa.int32()),
    ]
    if include_headers:
        arrays.append(pa.array(columns.headers, schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_range(
    options: ReadOptions,
    tp: TopicPartition,
    from_offset: int,
    until_offset: int,
    schema: pa.Schema,
    *,
    client: BlockingClient | None = None,
) -> Iterator[pa.RecordBatch]:
    """Records ``[from_offset, until_offset)`` of ``tp`` as Arrow batches (one per fetch).

    Runs on an executor: opens its own connection (unless ``client`` is given), follows the
    leader, retries retriable failures until ``kafkaConsumer.pollTimeoutMs``. Fetches use
    the query's isolation level; the range is done when the fetch position reaches
    ``until_offset``, which counts offsets, not rows: markers and aborted records take
    offsets and give none.
    """
    session = _Session(
        options.bootstrap_servers,
        options.client_id,
        options.request_timeout_ms,
        options.security_properties,
    )
    own = client is None
    if client is not None:
        session._client = client
    timeout_s = options.poll_timeout_ms / 1000
    offset = from_offset
    backoff = Backoff(timeout_s, f"reading {tp} [{from_offset}, {until_offset})")
    short_hw_since: float | None = None
    unstable_since: float | None = None
    read_committed = options.read_committed
    try:
        while offset < until_offset:
            try:
                results = session.client.fetch(
                    {
                        tp: FetchRequestPartition(
                            offset, partition_max_bytes=options.fetch_max_bytes
                        )
                    },
                    max_wait_ms=500,
                    max_bytes=options.fetch_max_bytes,
                    isolation_level=READ_COMMITTED if read_committed else READ_UNCOMMITTED,
                )
            except (ClientConnectionError, ClientTimeoutError) as exc:
                backoff.wait(exc)
                session.refresh([tp.topic])
                continue
            result = results.get(tp)
            code = result.error_code if result is not None else ErrorCode.UNKNOWN_SERVER_ERROR
            if result is None or code in _REFRESH_ERRORS:
                backoff.wait(f"{tp}: {code.name}")
                session.refresh([tp.topic])
                continue
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                earliest = OffsetReader(options)
                earliest.session = session
                start = earliest.earliest([tp])[tp]
                if offset < start:
                    _report_loss(
                        options,
                        f"{tp}: offsets [{offset}, {min(start, until_offset)}) were deleted "
                        f"(log start offset is now {start})",
                    )
                    offset = start
                    continue
                _report_loss(
                    options,
                    f"{tp}: offsets [{offset}, {until_offset}) are no longer in the log "
                    "(an unclean leader election or a recreated topic took them back)",
                )
                return
            if code != ErrorCode.NONE:
                raise ConnectorError(f"fetching {tp} at offset {offset}: {code.name}")
            backoff.reset()
            columns = Columns()
            offset = decode_into(
                result.records,
                columns,
                from_offset=offset,
                until_offset=until_offset,
                include_headers=options.include_headers,
                aborted_transactions=result.aborted_transactions if read_committed else None,
            )
            if columns:
                yield to_record_batch(columns, tp, schema, include_headers=options.include_headers)
            if offset < until_offset and not result.records:
                # What this isolation level may read ends at the LSO (read_committed) or the
                # HW; a broker that does not know its LSO says -1.
                hw, lso = result.high_watermark, result.last_stable_offset
                end, end_name = (
                    (lso, "last stable offset")
                    if read_committed and lso >= 0
                    else (hw, "high watermark")
                )
                if end >= until_offset or end > offset:
                    continue  # long poll came back empty; data is there
                now = time.monotonic()
                if hw > offset:
                    # read_committed: the records are in the log but a transaction that is
                    # neither committed nor aborted holds the LSO back. Not loss: wait for
                    # the transaction to end (its timeout aborts it at the latest).
                    unstable_since = unstable_since or now
                    if now - unstable_since < timeout_s:
                        time.sleep(0.2)
                        continue
                    raise ConnectorError(
                        f"reading {tp} [{from_offset}, {until_offset}): the last stable offset "
                        f"stayed at {lso} (high watermark {hw}) for {timeout_s:g} s: a "
                        f"transaction open at offset {lso} was neither committed nor aborted"
                    )
                # The HW (LSO) is below what was planned: wait out a stale one (a restarted
                # broker), then call it loss.
                short_hw_since = short_hw_since or now
                if now - short_hw_since < min(_HW_GRACE_S, timeout_s):
                    time.sleep(0.2)
                    continue
                _report_loss(
                    options,
                    f"{tp}: the {end_name} is {end}, below the planned end {until_offset}; "
                    f"offsets [{offset}, {until_offset}) are gone",
                )
                return
            short_hw_since = None
            unstable_since = None
    finally:
        if own:
            session.close()


def _report_loss(options: ReadOptions, message: str) -> None:
    if options.fail_on_data_loss:
        raise DataLossError(
            message + ". Some data may have been lost. If you want the query to go on "
            "regardless, set the option 'failOnDataLoss' to false."
        )
    log.warning("%s; skipping them (failOnDataLoss is false)", message)


# --- writes ------------------------------------------------------------------------------


def _encode_varint(value: int) -> bytes:
    value = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


#: Zigzag varints of -1 .. 16383 (lengths, offset deltas, counts): the common case.
_VARINTS: Final = [_encode_varint(v) for v in range(-1, 1 << 14)]


def _varint(value: int) -> bytes:
    return _VARINTS[value + 1] if -1 <= value < (1 << 14) else _encode_varint(value)


PendingRecord = tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]


#: Batch attributes bit 4: the batch belongs to a transaction.
_TRANSACTIONAL_ATTRIBUTE: Final = 0x10


def encode_batch(
    records: Sequence[PendingRecord],
    timestamp_ms: int,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """One uncompressed v2 batch of ``(key, value, headers)`` records, all stamped
    ``timestamp_ms`` (CreateTime). The same bytes ``tidelog.client.build_batch`` writes,
    built with table-driven varints: the write path's hot loop. An idempotent or
    transactional producer passes its producer id, epoch and the batch's first sequence."""
    parts: list[bytes] = []
    append = parts.append
    varint = _varint
    null = _VARINTS[0]
    for delta, (key, value, headers) in enumerate(records):
        fields = [
            b"\x00\x00",  # attributes, timestampDelta 0
            varint(delta),
            null if key is None else varint(len(key)) + key,
            null if value is None else varint(len(value)) + value,
            varint(len(headers)),
        ]
        for header_key, header_value in headers:
            raw_key = header_key.encode()
            fields.append(varint(len(raw_key)) + raw_key)
            fields.append(
                null if header_value is None else varint(len(header_value)) + header_value
            )
        body = b"".join(fields)
        append(varint(len(body)))
        append(body)
    payload = b"".join(parts)
    header = bytearray(
        _BATCH_HEAD.pack(
            0,
            BATCH_HEADER_SIZE - 12 + len(payload),
            -1,
            2,
            0,
            _TRANSACTIONAL_ATTRIBUTE if transactional else 0,
            len(records) - 1,
            timestamp_ms,
            timestamp_ms,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    crc = crc32c.crc32c(payload, crc32c.crc32c(bytes(header[CRC_START:])))
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + payload


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's ``Utils.murmur2``), as a signed 32-bit int."""
    m = 0x5BD1E995
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def default_partition(key: bytes, num_partitions: int) -> int:
    """Kafka's default partitioner for a keyed record: toPositive(murmur2(key)) % n."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


#: Produce answers that mean "written": DUPLICATE_SEQUENCE_NUMBER is a retry of a batch the
#: leader already has (an idempotent producer's; the Java producer takes it as success).
_PRODUCED: Final = frozenset({ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER})


class Producer:
    """Buffers records per partition and produces them (acks from the options) on flush.

    Partition choice follows Kafka's producer: the record's ``partition`` if given, else
    murmur2 of the key, else round-robin over the partitions. Each flush sends one batch
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
    ) -> None:
        self.session = _Session(bootstrap, client_id, request_timeout_ms, security_properties)
        self.acks = acks
        self.request_timeout_ms = request_timeout_ms
        self.retry_timeout_s = retry_timeout_ms / 1000
        self.batch_records = batch_records
        self.batch_bytes = batch_bytes
        self.now_ms = now_ms
        self._num_partitions: dict[str, int] = {}
        self._pending: dict[TopicPartition, list[PendingRecord]] = {}
        self._pending_bytes = 0
        self._round_robin = 0
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
            if meta is None or meta.error_code in _REFRESH_ERRORS or not meta.partitions:
                code = meta.error_code.name if meta else "no answer"
                raise _RetryableError(f"metadata of topic {topic!r}: {code}")
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
                partition = default_partition(key, n)
            else:
                partition = self._round_robin % n
                self._round_robin += 1
        elif not 0 <= partition < n:
            raise ConnectorError(
                f"a row asks for partition {partition} of topic {topic!r}, which has "
                f"partitions 0..{n - 1}"
            )
        tp = TopicPartition(topic, partition)
        pending = self._pending.setdefault(tp, [])
        pending.append((key, value, headers))
        self._pending_bytes += (len(value) if value else 0) + (len(key) if key else 0) + 24
        if len(pending) >= self.batch_records or self._pending_bytes >= self.batch_bytes * 8:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        pending, self._pending, self._pending_bytes = self._pending, {}, 0
        now = self.now_ms()
        batches: dict[TopicPartition, list[bytes]] = {}
        for tp, records in pending.items():
            chunks: list[bytes] = []
            start = 0
            while start < len(records):
                # Cut batches near batch_bytes so none exceeds the broker's message.max.bytes.
                size, end = 0, start
                while end < len(records) and (end == start or size < self.batch_bytes):
                    key, value, _headers = records[end]
                    size += (len(value) if value else 0) + (len(key) if key else 0) + 16
                    end += 1
                chunks.append(self._encode(tp, records[start:end], now))
                start = end
            batches[tp] = chunks
        self._before_produce(sorted(batches))
        backoff = Backoff(self.retry_timeout_s, "producing")
        while batches:
            failures = self.session.client.run(self._produce_all(batches))
            done = [tp for tp in batches if tp not in failures]
            for tp in done:
                self.written[tp] = self.written.get(tp, 0) + len(pending[tp])
                del batches[tp]
            if not batches:
                return
            for tp, reason in failures.items():
                if reason is not None:
                    raise ConnectorError(f"producing to {tp}: {reason}")
            backoff.wait(", ".join(sorted(str(tp) for tp in failures)))
            self.session.refresh(sorted({tp.topic for tp in batches}))

    def _encode(self, tp: TopicPartition, records: Sequence[PendingRecord], now_ms: int) -> bytes:
        """One batch of ``records`` for ``tp`` (a hook: the transactional producer stamps
        its producer id, epoch and sequences)."""
        return encode_batch(records, now_ms)

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
                    if result.error_code in _REFRESH_ERRORS:
                        return None
                    return f"{result.error_code.name} {result.error_message or ''}".strip()
                chunks.pop(0)
            return True

        tps = list(batches)
        outcomes: list[Any] = await asyncio.gather(*(one(tp, batches[tp]) for tp in tps))
        return {tp: o for tp, o in zip(tps, outcomes, strict=True) if o is not True}
