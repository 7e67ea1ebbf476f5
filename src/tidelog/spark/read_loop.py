"""The executors' read loop: one offset range of one partition, fetched into Arrow batches.

Each task opens its own connection, follows the leader and retries retriable failures until
``kafkaConsumer.pollTimeoutMs`` (``tidelog.spark.session``). Fetches use the query's
isolation level (KIP-98): what it may read ends at the last stable offset (read_committed)
or the high watermark (read_uncommitted).

Offsets that went away (retention, DeleteRecords, an unclean election) raise
``DataLossError`` when ``failOnDataLoss`` is true; otherwise the reader logs a warning and
skips them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Final

import pyarrow as pa

from tidelog.client import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    BlockingClient,
    ClientConnectionError,
    ClientTimeoutError,
    FetchRequestPartition,
    FetchResult,
)
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.spark.arrow_decode import decode_fetch
from tidelog.spark.decode import Columns, decode_into, to_record_batch
from tidelog.spark.errors import ConnectorError, DataLossError
from tidelog.spark.offset_reader import OffsetReader
from tidelog.spark.options import ReadOptions
from tidelog.spark.session import REFRESH_ERRORS, Backoff, Session, wait

log = logging.getLogger(__name__)

#: How long a high watermark below the planned end is waited out before it counts as loss
#: (a restarted broker may serve a checkpointed, slightly stale HW until the next append).
_HW_GRACE_S: Final = 10.0
#: The pause between fetches while an end (HW or LSO) below the range is waited out.
_END_POLL_S: Final = 0.2


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
    session = Session(
        options.bootstrap_servers,
        options.client_id,
        options.request_timeout_ms,
        options.security_properties,
        client=client,
    )
    try:
        reader = _RangeRead(
            options, session, tp, from_offset=from_offset, until_offset=until_offset, schema=schema
        )
        yield from reader.batches()
    finally:
        if client is None:
            session.close()


def report_loss(options: ReadOptions, message: str) -> None:
    """Offsets the query planned are gone: ``DataLossError`` if ``failOnDataLoss``, else a
    warning (the caller skips them)."""
    if options.fail_on_data_loss:
        raise DataLossError(
            message + ". Some data may have been lost. If you want the query to go on "
            "regardless, set the option 'failOnDataLoss' to false."
        )
    log.warning("%s; skipping them (failOnDataLoss is false)", message)


class _RangeRead:
    """The state of one ``read_range``: the fetch position and the waits under way."""

    def __init__(
        self,
        options: ReadOptions,
        session: Session,
        tp: TopicPartition,
        *,
        from_offset: int,
        until_offset: int,
        schema: pa.Schema,
    ) -> None:
        self.options = options
        self.session = session
        self.tp = tp
        self.from_offset = from_offset
        self.until_offset = until_offset
        self.schema = schema
        self.timeout_s = options.poll_timeout_ms / 1000
        self.read_committed = options.read_committed
        self.backoff = Backoff(
            time.monotonic() + self.timeout_s, f"reading {tp} [{from_offset}, {until_offset})"
        )
        #: The next offset to fetch.
        self.offset = from_offset
        #: Since when the end (HW or LSO) has stood below the range (None: it does not).
        self.short_hw_since: float | None = None
        #: Since when an open transaction has held the LSO below the HW (read_committed).
        self.unstable_since: float | None = None

    def batches(self) -> Iterator[pa.RecordBatch]:
        """Fetch, decode and yield until the range is read (or found gone)."""
        tp = self.tp
        while self.offset < self.until_offset:
            result = self._fetch()
            if result is None:
                continue  # retried after a backoff
            code = result.error_code
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                if self._skip_to_log_start():
                    continue
                return
            if code != ErrorCode.NONE:
                raise ConnectorError(f"fetching {tp} at offset {self.offset}: {code.name}")
            self.backoff.reset()
            batch = self._decode(result)
            if batch is not None:
                yield batch
            if self.offset < self.until_offset and not result.records:
                if self._wait_for_end(result):
                    continue
                return
            self.short_hw_since = None
            self.unstable_since = None

    def _decode(self, result: FetchResult) -> pa.RecordBatch | None:
        """The rows of one fetch (None: none), vectorized (``arrow_decode``) unless they
        carry headers the query asks for; moves the position past the batches seen."""
        include_headers = self.options.include_headers
        aborted = result.aborted_transactions if self.read_committed else None
        decoded = decode_fetch(
            result.records,
            self.tp,
            self.schema,
            from_offset=self.offset,
            until_offset=self.until_offset,
            include_headers=include_headers,
            aborted_transactions=aborted,
        )
        if decoded is not None:
            batch, self.offset = decoded
            return batch
        columns = Columns()
        self.offset = decode_into(
            result.records,
            columns,
            from_offset=self.offset,
            until_offset=self.until_offset,
            include_headers=include_headers,
            aborted_transactions=aborted,
        )
        if not columns:
            return None
        return to_record_batch(columns, self.tp, self.schema, include_headers=include_headers)

    def _fetch(self) -> FetchResult | None:
        """One fetch at the position; None after a retriable failure (backed off and
        refreshed: fetch again)."""
        tp, options = self.tp, self.options
        try:
            results = self.session.client.fetch(
                {
                    tp: FetchRequestPartition(
                        self.offset, partition_max_bytes=options.fetch_max_bytes
                    )
                },
                max_wait_ms=500,
                max_bytes=options.fetch_max_bytes,
                isolation_level=READ_COMMITTED if self.read_committed else READ_UNCOMMITTED,
            )
        except (ClientConnectionError, ClientTimeoutError) as exc:
            wait(self.backoff, exc)
            self.session.refresh([tp.topic])
            return None
        result = results.get(tp)
        code = result.error_code if result is not None else ErrorCode.UNKNOWN_SERVER_ERROR
        if result is None or code in REFRESH_ERRORS:
            wait(self.backoff, f"{tp}: {code.name}")
            self.session.refresh([tp.topic])
            return None
        return result

    def _skip_to_log_start(self) -> bool:
        """OFFSET_OUT_OF_RANGE: report the lost offsets. True: the log now starts past the
        position, which moves there; False: the log ends below it, the range is done."""
        tp, offset, until_offset = self.tp, self.offset, self.until_offset
        start = OffsetReader(self.options, self.session).earliest([tp])[tp]
        if offset < start:
            report_loss(
                self.options,
                f"{tp}: offsets [{offset}, {min(start, until_offset)}) were deleted "
                f"(log start offset is now {start})",
            )
            self.offset = start
            return True
        report_loss(
            self.options,
            f"{tp}: offsets [{offset}, {until_offset}) are no longer in the log "
            "(an unclean leader election or a recreated topic took them back)",
        )
        return False

    def _wait_for_end(self, result: FetchResult) -> bool:
        """A fetch gave nothing short of the range's end. True: fetch again (the data is
        there, or a wait is under way); False: the rest of the range is reported lost."""
        offset, until_offset, timeout_s = self.offset, self.until_offset, self.timeout_s
        # What this isolation level may read ends at the LSO (read_committed) or the HW; a
        # broker that does not know its LSO says -1.
        hw, lso = result.high_watermark, result.last_stable_offset
        end, end_name = (
            (lso, "last stable offset")
            if self.read_committed and lso >= 0
            else (hw, "high watermark")
        )
        if end >= until_offset or end > offset:
            return True  # long poll came back empty; data is there
        now = time.monotonic()
        if hw > offset:
            # read_committed: the records are in the log but a transaction that is neither
            # committed nor aborted holds the LSO back. Not loss: wait for the transaction
            # to end (its timeout aborts it at the latest).
            self.unstable_since = self.unstable_since or now
            if now - self.unstable_since < timeout_s:
                time.sleep(_END_POLL_S)
                return True
            raise ConnectorError(
                f"reading {self.tp} [{self.from_offset}, {until_offset}): the last stable "
                f"offset stayed at {lso} (high watermark {hw}) for {timeout_s:g} s: a "
                f"transaction open at offset {lso} was neither committed nor aborted"
            )
        # The HW (LSO) is below what was planned: wait out a stale one (a restarted broker),
        # then call it loss.
        self.short_hw_since = self.short_hw_since or now
        if now - self.short_hw_since < min(_HW_GRACE_S, timeout_s):
            time.sleep(_END_POLL_S)
            return True
        report_loss(
            self.options,
            f"{self.tp}: the {end_name} is {end}, below the planned end {until_offset}; "
            f"offsets [{offset}, {until_offset}) are gone",
        )
        return False
