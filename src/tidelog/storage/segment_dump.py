"""Reading segment files for ``tidelog dump-log`` (Kafka's ``kafka-dump-log.sh``,
``kafka.tools.DumpLogSegments``): what a log, offset index, time index or aborted-transaction
index holds, line by line in Kafka's words, and what is wrong with it.

Read-only: files are opened for reading and never created, locked or repaired, so a live
broker's segments can be dumped. ``dump_file`` yields ``DumpLine``s; a line with
``problem=True`` reports damage (the command prints it to stderr and exits 1). The checks:

  * ``.log``: every batch's framing (length, magic 2) and CRC-32C (``isvalid``); with deep
    iteration every record (``tidelog.storage.record_scan``: decompressed, walked, offsets
    consecutive across the file). Bytes after the last whole batch (a torn tail) are
    reported with the position where they start and why they are not a batch, as Kafka's
    "Found N invalid bytes at the end of FILE". ``max_bytes`` reads only the first bytes
    of the file (whole batches within them; no tail report then).
  * ``.index``: each entry must point at the start of a batch whose last offset it names
    (Kafka's "Mismatches in"); ``index_sanity_check`` instead runs the load checks that
    decide whether a broker rebuilds the index at start-up (``tidelog.storage.index``:
    whole 8-byte entries, offsets and positions strictly increasing, offsets not below the
    base offset, positions inside the log) and prints Kafka's "FILE passed sanity check."
  * ``.timeindex``: each entry must name the last offset of a batch whose max timestamp it
    holds, timestamps increasing (Kafka's time index dump errors); the sanity check as
    above with 12-byte entries, timestamps strictly and offsets weakly increasing.
  * ``.txnindex``: the aborted transactions, checked as ``tidelog.storage.txn_index`` loads
    them.
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, NamedTuple

from tidelog.protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    BatchHeader,
    CorruptRecordBatchError,
    TimestampType,
    compute_crc,
    parse_header,
)
from tidelog.storage.compression import CodecError, codec_name, decompress
from tidelog.storage.index import OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE
from tidelog.storage.record_scan import DecodedRecord, RecordFormatError, iter_records
from tidelog.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from tidelog.storage.txn_index import (
    TXN_ENTRY_SIZE,
    TXN_INDEX_SUFFIX,
    TxnIndexCorruptError,
    decode_entries,
)

#: Kafka's default --max-bytes (Integer.MAX_VALUE).
DEFAULT_MAX_BYTES: Final = 2**31 - 1
#: Deep iteration decompresses a batch into at most this much (a damaged file may claim more).
_DEEP_MAX_BYTES: Final = 1 << 30
_NO_SEQUENCE: Final = -1
_INT_MAX: Final = 2**31 - 1
_DELETE_HORIZON_FLAG: Final = 0x40
_OFFSET_ENTRY: Final = struct.Struct(">ii")
_TIME_ENTRY: Final = struct.Struct(">qi")
_CONTROL_KEY: Final = struct.Struct(">hh")
_END_TXN_VALUE: Final = struct.Struct(">hi")
#: Kafka's ControlRecordType ids.
_CONTROL_TYPES: Final = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class DumpOptions:
    """kafka-dump-log's options (``--print-data-log`` implies deep iteration, as in Kafka)."""

    print_data_log: bool = False
    deep_iteration: bool = False
    index_sanity_check: bool = False
    max_bytes: int = DEFAULT_MAX_BYTES


class DumpLine(NamedTuple):
    """One line of output: ``problem`` reports damage, ``warning`` a file passed over
    (both for stderr; only a problem fails the dump)."""

    text: str
    problem: bool = False
    warning: bool = False


def dump_file(path: Path, options: DumpOptions) -> Iterator[DumpLine]:
    """The dump of one file, starting with Kafka's "Dumping FILE"."""
    yield DumpLine(f"Dumping {path}")
    suffix = path.suffix
    dumpers = {
        LOG_SUFFIX: _dump_log,
        INDEX_SUFFIX: _dump_offset_index,
        TIME_INDEX_SUFFIX: _dump_time_index,
        TXN_INDEX_SUFFIX: _dump_txn_index,
    }
    dumper = dumpers.get(suffix)
    if dumper is None:
        yield DumpLine(f"Ignoring unknown file {path}", warning=True)
        return
    if not path.is_file():
        yield DumpLine(f"cannot read {path}: no such file", problem=True)
        return
    try:
        yield from dumper(path, options)
    except OSError as exc:
        yield DumpLine(f"cannot read {exc.filename or path}: {exc.strerror}", problem=True)


def _base_offset(path: Path) -> int:
    stem = path.name.split(".")[0]
    if not stem.isdigit():
        raise OSError(0, f"the name is not <base offset>{path.suffix}", str(path))
    return int(stem)


# ------------------------------------------------------------------ .log


def _last_sequence(base_sequence: int, delta: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: sequences wrap at Integer.MAX_VALUE."""
    if base_sequence == _NO_SEQUENCE:
        return _NO_SEQUENCE
    if base_sequence > _INT_MAX - delta:
        return delta - (_INT_MAX - base_sequence) - 1
    return base_sequence + delta


def _timestamp_type_name(header: BatchHeader) -> str:
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        return "LogAppendTime"
    return "CreateTime"


def _batch_line(header: BatchHeader, position: int, valid: bool) -> str:
    horizon = (
        f"OptionalLong[{header.base_timestamp}]"
        if header.attributes & _DELETE_HORIZON_FLAG
        else "OptionalLong.empty"
    )
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.records_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {_last_sequence(header.base_sequence, header.last_offset_delta)} "
        f"producerId: {header.producer_id} producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {str(header.is_transactional).lower()} "
        f"isControl: {str(header.is_control).lower()} deleteHorizonMs: {horizon} "
        f"position: {position} {_timestamp_type_name(header)}: {header.max_timestamp} "
        f"size: {header.size} magic: {header.magic} "
        f"compresscodec: {codec_name(header.compression)} crc: {header.crc} "
        f"isvalid: {str(valid).lower()}"
    )


def _text(value: bytes) -> str:
    """Kafka's default StringDecoder: the bytes as UTF-8."""
    return value.decode("utf-8", errors="replace")


def _control_text(record: DecodedRecord) -> str:
    key = record.key or b""
    if len(key) < _CONTROL_KEY.size:
        return " controlType: UNKNOWN(-1)"
    _version, control_type = _CONTROL_KEY.unpack_from(key)
    name = _CONTROL_TYPES.get(control_type, "UNKNOWN")
    value = record.value or b""
    if control_type in (0, 1) and len(value) >= _END_TXN_VALUE.size:
        _value_version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
        return f" endTxnMarker: {name} coordinatorEpoch: {coordinator_epoch}"
    return f" controlType: {name}({control_type})"


def _record_line(header: BatchHeader, record: DecodedRecord, print_data: bool) -> str:
    offset = header.base_offset + record.offset_delta
    timestamp = (
        header.max_timestamp
        if header.timestamp_type == TimestampType.LOG_APPEND_TIME
        else header.base_timestamp + record.timestamp_delta
    )
    keys = ",".join(_text(k) for k, _v in record.headers)
    line = (
        f"| offset: {offset} {_timestamp_type_name(header)}: {timestamp} "
        f"keySize: {-1 if record.key is None else len(record.key)} "
        f"valueSize: {-1 if record.value is None else len(record.value)} "
        f"sequence: {_last_sequence(header.base_sequence, record.offset_delta)} "
        f"headerKeys: [{keys}]"
    )
    if header.is_control:
        line += _control_text(record)
    elif print_data:
        if record.key is not None:
            line += f" key: {_text(record.key)}"
        if record.value is not None:
            line += f" payload: {_text(record.value)}"
    return line


def _read_header(fd: int, position: int, available: int) -> tuple[BatchHeader | None, str]:
    """The header of the batch at ``position`` if a whole one lies within ``available`` bytes,
    else None and why not ("" when only ``available`` cut it)."""
    head = os.pread(fd, BATCH_HEADER_SIZE, position)
    if len(head) < LOG_OVERHEAD + 5:
        return None, f"{len(head)} bytes are too few for a batch header"
    (length,) = struct.unpack_from(">i", head, 8)
    magic = head[16]
    if magic != MAGIC_V2:
        return None, f"the batch there has magic {magic}, not {MAGIC_V2}"
    if length + LOG_OVERHEAD < BATCH_HEADER_SIZE:
        return None, f"the batch there declares length {length}, below the header size"
    if len(head) < BATCH_HEADER_SIZE:
        return None, f"the batch header is truncated after {len(head)} bytes"
    header = parse_header(head, whole=False)
    if header.size > available:
        return None, f"the batch there declares {header.size} bytes but {available} remain"
    return header, ""


def _dump_log(path: Path, options: DumpOptions) -> Iterator[DumpLine]:
    base = _base_offset(path)
    yield DumpLine(f"Log starting offset: {base}")
    deep = options.deep_iteration or options.print_data_log
    fd = os.open(path, os.O_RDONLY)
    try:
        file_size = os.fstat(fd).st_size
        limit = min(file_size, max(0, options.max_bytes))
        position = 0
        last_offset: int | None = None
        non_consecutive: list[tuple[int, int]] = []
        reason = ""
        while position < limit:
            header, reason = _read_header(fd, position, file_size - position)
            if header is None:
                break
            if position + header.size > limit:
                break  # --max-bytes: Kafka prints the whole batches within it only
            batch = os.pread(fd, header.size, position)
            valid = len(batch) == header.size and compute_crc(batch, 0, header) == header.crc
            yield DumpLine(_batch_line(header, position, valid))
            if not valid:
                yield DumpLine(
                    f"batch at position {position} (offset {header.base_offset}) fails its "
                    "CRC-32C check",
                    problem=True,
                )
            if deep:
                for item in _records(batch, header, position, options.print_data_log):
                    if isinstance(item, DumpLine):
                        yield item  # the batch's other records are lost: not a gap
                        last_offset = header.last_offset
                        continue
                    if last_offset is not None and item[0] != last_offset + 1:
                        non_consecutive.append((last_offset, item[0]))
                    last_offset = item[0]
                    yield DumpLine(item[1])
            position += header.size
        if reason:
            yield DumpLine(
                f"Found {file_size - position} invalid bytes at the end of {path.name}: at "
                f"position {position}, {reason}",
                problem=True,
            )
        if non_consecutive:
            yield DumpLine(f"Non-consecutive offsets in {path}", problem=True)
            for first, second in non_consecutive:
                yield DumpLine(f"  {first} is followed by {second}", problem=True)
    finally:
        os.close(fd)


def _records(
    batch: bytes, header: BatchHeader, position: int, print_data: bool
) -> Iterator[tuple[int, str] | DumpLine]:
    """``(offset, line)`` per record of one batch, or a problem line where they stop."""
    try:
        body = decompress(header.compression, batch[BATCH_HEADER_SIZE:], max_bytes=_DEEP_MAX_BYTES)
        for record in iter_records(body, header.records_count):
            offset = header.base_offset + record.offset_delta
            yield offset, _record_line(header, record, print_data)
    except (CodecError, RecordFormatError, CorruptRecordBatchError) as exc:
        yield DumpLine(
            f"batch at position {position} (offset {header.base_offset}): its records "
            f"cannot be read: {exc}",
            problem=True,
        )


def _batch_headers(log_path: Path) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of the whole batches of a log file, stopping at damage."""
    out: list[tuple[int, BatchHeader]] = []
    fd = os.open(log_path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        position = 0
        while position < size:
            header, _reason = _read_header(fd, position, size - position)
            if header is None:
                break
            out.append((position, header))
            position += header.size
    finally:
        os.close(fd)
    return out


# ------------------------------------------------------------------ indexes


def _index_context(path: Path) -> tuple[int, bytes, Path]:
    return _base_offset(path), path.read_bytes(), path.with_suffix(LOG_SUFFIX)


def offset_index_problems(data: bytes, base: int, log_size: int, path: Path) -> list[str]:
    """What makes a broker rebuild this offset index at start-up (``OffsetIndex.load``), in
    Kafka's words where Kafka's ``OffsetIndex.sanityCheck`` has them."""
    if len(data) % OFFSET_ENTRY_SIZE:
        return [
            f"Index file {path} is corrupt, found {len(data)} bytes which is neither positive "
            f"nor a multiple of {OFFSET_ENTRY_SIZE}."
        ]
    problems: list[str] = []
    last_offset = last_position = -1
    for i, (relative, position) in enumerate(_OFFSET_ENTRY.iter_unpack(data)):
        offset = base + relative
        at = f"entry {i} at byte {i * OFFSET_ENTRY_SIZE} (offset {offset}, position {position})"
        if relative < 0:
            problems.append(
                f"Corrupt index found, index file ({path}) has an offset {offset} which is "
                f"less than the base offset {base}: {at}"
            )
        elif offset <= last_offset:
            problems.append(f"{at}: the offset is not above the previous entry's {last_offset}")
        elif position <= last_position:
            problems.append(f"{at}: the position is not above the previous entry's {last_position}")
        elif position >= log_size:
            problems.append(f"{at}: the position is past the end of the log ({log_size} bytes)")
        last_offset, last_position = max(last_offset, offset), max(last_position, position)
    return problems


def time_index_problems(data: bytes, base: int, path: Path) -> list[str]:
    """As ``offset_index_problems`` for a time index (``TimeIndex.load``,
    Kafka's ``TimeIndex.sanityCheck``)."""
    if len(data) % TIME_ENTRY_SIZE:
        return [
            f"Time index file {path} is corrupt, found {len(data)} bytes which is neither "
            f"positive nor a multiple of {TIME_ENTRY_SIZE}."
        ]
    problems: list[str] = []
    last_timestamp: int | None = None
    last_offset = -1
    for i, (timestamp, relative) in enumerate(_TIME_ENTRY.iter_unpack(data)):
        offset = base + relative
        at = f"entry {i} at byte {i * TIME_ENTRY_SIZE} (timestamp {timestamp}, offset {offset})"
        if relative < 0:
            problems.append(
                f"Corrupt time index found, time index file ({path}) has an offset {offset} "
                f"which is less than the base offset {base}: {at}"
            )
        elif last_timestamp is not None and timestamp <= last_timestamp:
            problems.append(
                f"{at}: the timestamp is not above the previous entry's {last_timestamp}"
            )
        elif offset < last_offset:
            problems.append(f"{at}: the offset is below the previous entry's {last_offset}")
        last_timestamp = timestamp if last_timestamp is None else max(last_timestamp, timestamp)
        last_offset = max(last_offset, offset)
    return problems


def _dump_offset_index(path: Path, options: DumpOptions) -> Iterator[DumpLine]:
    base, data, log_path = _index_context(path)
    if not data:
        yield DumpLine(f"{path} is empty.")
        return
    if options.index_sanity_check:
        log_size = log_path.stat().st_size if log_path.exists() else 2**63 - 1
        problems = offset_index_problems(data, base, log_size, path)
        if not problems:
            yield DumpLine(f"{path} passed sanity check.")
        for problem in problems:
            yield DumpLine(problem, problem=True)
        return
    if len(data) % OFFSET_ENTRY_SIZE:
        yield DumpLine(offset_index_problems(data, base, 0, path)[0], problem=True)
    batches = _batch_headers(log_path) if log_path.exists() else None
    if batches is None:
        yield DumpLine(f"{log_path} is missing: entries are not checked", problem=True)
    by_position = dict(batches or [])
    mismatches: list[tuple[int, int]] = []
    whole = len(data) - len(data) % OFFSET_ENTRY_SIZE
    for i, (relative, position) in enumerate(_OFFSET_ENTRY.iter_unpack(data[:whole])):
        offset = base + relative
        if offset == base and i > 0:
            break  # Kafka: a sparse file's zero tail
        if batches is not None:
            header = by_position.get(position)
            found = header.last_offset if header is not None else -1
            if found != offset:
                mismatches.append((offset, found))
        yield DumpLine(f"offset: {offset} position: {position}")
    if mismatches:
        yield DumpLine(f"Mismatches in :{path}", problem=True)
        for index_offset, log_offset in mismatches:
            yield DumpLine(
                f"  Index offset: {index_offset}, log offset: {log_offset}", problem=True
            )


def _dump_time_index(path: Path, options: DumpOptions) -> Iterator[DumpLine]:
    base, data, log_path = _index_context(path)
    if not data:
        yield DumpLine(f"{path} is empty.")
        return
    if options.index_sanity_check:
        problems = time_index_problems(data, base, path)
        if not problems:
            yield DumpLine(f"{path} passed sanity check.")
        for problem in problems:
            yield DumpLine(problem, problem=True)
        return
    if len(data) % TIME_ENTRY_SIZE:
        yield DumpLine(time_index_problems(data, base, path)[0], problem=True)
    batches = _batch_headers(log_path) if log_path.exists() else None
    if batches is None:
        yield DumpLine(f"{log_path} is missing: entries are not checked", problem=True)
    check = _TimeIndexCheck(batches)
    whole = len(data) - len(data) % TIME_ENTRY_SIZE
    for i, (timestamp, relative) in enumerate(_TIME_ENTRY.iter_unpack(data[:whole])):
        offset = base + relative
        if offset == base and i > 0:
            break
        check.entry(timestamp, offset)
        yield DumpLine(f"timestamp: {timestamp} offset: {offset}")
    yield from check.problems(path)


@dataclass(slots=True)
class _TimeIndexCheck:
    """Kafka's DumpLogSegments checks of a time index's entries against its log's batches:
    each indexed offset is a batch's last offset, with that batch's largest timestamp, and
    the timestamps rise."""

    batches: list[tuple[int, BatchHeader]] | None
    not_found: list[tuple[int, int]] = field(default_factory=list)
    mismatches: list[tuple[int, int]] = field(default_factory=list)
    out_of_order: list[tuple[int, int]] = field(default_factory=list)
    previous: int | None = None
    last_offsets: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.last_offsets = [header.last_offset for _position, header in self.batches or []]

    def entry(self, timestamp: int, offset: int) -> None:
        batches = self.batches
        if batches is not None:
            at = bisect.bisect_left(self.last_offsets, offset)
            if at == len(batches):
                self.not_found.append((offset, -1))
            elif batches[at][1].last_offset != offset:
                self.not_found.append((offset, batches[at][1].last_offset))
            else:
                if batches[at][1].max_timestamp != timestamp:
                    self.mismatches.append((timestamp, batches[at][1].max_timestamp))
                if self.previous is not None and self.previous >= timestamp:
                    self.out_of_order.append((timestamp, self.previous))
        self.previous = timestamp

    def problems(self, path: Path) -> Iterator[DumpLine]:
        if self.mismatches:
            yield DumpLine(f"Found timestamp mismatch in :{path}", problem=True)
            for index_ts, log_ts in self.mismatches:
                yield DumpLine(
                    f"  Index timestamp: {index_ts}, log timestamp: {log_ts}", problem=True
                )
        if self.out_of_order:
            yield DumpLine(f"Found out of order timestamp in :{path}", problem=True)
            for index_ts, previous_ts in self.out_of_order:
                yield DumpLine(
                    f"  Index timestamp: {index_ts}, Previously indexed timestamp: {previous_ts}",
                    problem=True,
                )
        if self.not_found:
            yield DumpLine("The following indexed offsets are not found in the log.", problem=True)
            for index_offset, log_offset in self.not_found:
                yield DumpLine(
                    f"Indexed offset: {index_offset}, found log offset: {log_offset}",
                    problem=True,
                )


def _decodes(data: bytes, base: int) -> bool:
    try:
        decode_entries(data, base)
    except TxnIndexCorruptError:
        return False
    return True


def _dump_txn_index(path: Path, options: DumpOptions) -> Iterator[DumpLine]:
    base, data, _log_path = _index_context(path)
    whole = len(data) - len(data) % TXN_ENTRY_SIZE
    try:
        entries = decode_entries(data[:whole], base)
        problem = "" if whole == len(data) else f"{len(data) - whole} bytes of a torn entry"
        at = whole
    except TxnIndexCorruptError as exc:
        problem = str(exc)
        at = 0  # the entries before the bad one are still printed
        while at < whole and _decodes(data[: at + TXN_ENTRY_SIZE], base):
            at += TXN_ENTRY_SIZE
        entries = decode_entries(data[:at], base)
    for entry in entries:
        yield DumpLine(
            f"version: 0 producerId: {entry.producer_id} firstOffset: {entry.first_offset} "
            f"lastOffset: {entry.last_offset} lastStableOffset: {entry.last_stable_offset}"
        )
    if problem:
        yield DumpLine(f"{path} is corrupt at byte {at}: {problem}", problem=True)
