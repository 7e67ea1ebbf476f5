"""Opening a partition log (Kafka's ``LogLoader``): the directory's name, its leftovers,
its segments with their indexes, and recovery (``tidelog.storage.log`` rules 3 and 5): segments
below the recovery point with sound indexes are trusted, every batch at or above it is
re-validated, a torn or corrupt tail truncated, corruption below it refused; then what the
log rebuilds from the batch headers (leader epochs, the producer state, aborted-transaction
indexes to rebuild).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final

from tidelog.model import TopicPartition
from tidelog.storage.checkpoints import TMP_SUFFIX
from tidelog.storage.epoch_cache import LeaderEpochFileCache
from tidelog.storage.errors import CorruptLogError
from tidelog.storage.local_log import LocalLog
from tidelog.storage.log_config import NEVER, LogConfig
from tidelog.storage.producer_state import ProducerBatch, ProducerStateManager
from tidelog.storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
)
from tidelog.storage.segment_swap import complete_swaps
from tidelog.storage.transactions import parse_end_txn_marker
from tidelog.storage.txn_index import TXN_INDEX_SUFFIX

#: A future log's directory (Kafka's ``UnifiedLog.logFutureDirName``, KIP-113):
#: ``<topic>-<partition>.<32 hex digits>-future`` (``tidelog.storage.future_log``).
FUTURE_DIR_SUFFIX: Final = "-future"


def parse_topic_partition(directory: Path) -> TopicPartition:
    """``<topic>-<partition>`` directory name -> TopicPartition (Kafka's convention); a
    future log's ``<topic>-<partition>.<uuid>-future`` names the same partition."""
    name = directory.name
    if name.endswith(FUTURE_DIR_SUFFIX):
        stem, dot, unique = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
        if not dot or len(unique) != 32 or any(c not in "0123456789abcdef" for c in unique):
            raise ValueError(f"{directory} is not named <topic>-<partition>.<uuid>-future")
        name = stem
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{directory} is not named <topic>-<partition>")
    return TopicPartition(topic, int(partition))


def load_segments(
    directory: Path,
    config: LogConfig,
    *,
    now_ms: int,
    recovery_point: int,
    log_start_offset: int | None,
) -> tuple[list[LogSegment], list[tuple[int, int, int]]]:
    """Open (creating if absent) and recover the segments in ``directory``; returns them
    (at least one) and the epoch starts recovery read from the batches it validated.

    Leftovers go first: a cleaner's interrupted swap is completed
    (``tidelog.storage.segment_swap``), ``*.deleted`` and temporary files and indexes
    without their log file are removed.
    """
    directory.mkdir(parents=True, exist_ok=True)
    parse_topic_partition(directory)
    complete_swaps(directory)  # a cleaner's crash-safe swap (tidelog.storage.cleaner)
    for leftover in directory.iterdir():
        if leftover.name.endswith((DELETED_SUFFIX, TMP_SUFFIX)):
            leftover.unlink()
    bases = sorted(
        int(p.name[: -len(LOG_SUFFIX)])
        for p in directory.iterdir()
        if p.name.endswith(LOG_SUFFIX) and p.name[: -len(LOG_SUFFIX)].isdigit()
    )
    for p in directory.iterdir():
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            stem = p.name[: -len(suffix)]
            if p.name.endswith(suffix) and stem.isdigit() and int(stem) not in bases:
                p.unlink()  # an index without its log file
    segments: list[LogSegment] = []

    def new_segment(base: int) -> LogSegment:
        return LogSegment(
            directory,
            base,
            index_interval_bytes=config.index_interval_bytes,
            max_index_entries=config.max_index_entries,
            now_ms=now_ms,
        )

    try:
        segments = [new_segment(b) for b in bases]
        for seg in segments:
            # Before recovery, whose truncation of a torn tail also cuts this index.
            seg.txn_index.load()
        epoch_starts = recover(segments, recovery_point, gaps=config.compact)
    except BaseException:
        for s in segments:
            s.close()
        raise
    if not segments:
        segments.append(new_segment(log_start_offset or 0))
    return segments, epoch_starts


def recover(
    segments: list[LogSegment], recovery_point: int, *, gaps: bool = False
) -> list[tuple[int, int, int]]:
    """Load indexes, validate what needs it, truncate a bad tail; returns epoch starts.

    ``gaps`` (a compacted log): a segment may end before the next one starts (its last
    batches were cleaned away, or a follower fetched past them), as in Kafka."""
    epoch_starts: list[tuple[int, int, int]] = []
    i = 0
    while i < len(segments):
        seg = segments[i]
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else None
        index_ok = seg.load_indexes()
        if upper is not None and upper <= recovery_point and index_ok:
            seg.trust_up_to(upper)
            i += 1
            continue
        below = upper is not None and upper <= recovery_point
        result = seg.scan(
            # A rebuilt index below the recovery point re-validates the whole segment.
            verify_from_offset=seg.base_offset if below else recovery_point,
            full=not index_ok or seg.base_offset >= recovery_point,
            gaps=gaps,
        )
        epoch_starts += result.epoch_starts
        if result.error is not None:
            if result.next_offset < recovery_point:
                # The scan rewrote this segment's indexes; drop them so the next open
                # rebuilds (and re-checks) again instead of trusting a partial index.
                seg.offset_index.path.unlink(missing_ok=True)
                seg.time_index.path.unlink(missing_ok=True)
                raise CorruptLogError(
                    seg.log_path, result.valid_size, result.next_offset, result.error
                )
            seg.truncate_at(result.valid_size, result.next_offset)
            upper = None  # nothing after a torn batch survives
        if upper is not None and seg.next_offset < upper and (gaps or upper <= recovery_point):
            seg.next_offset = upper  # offsets cleaned away (tidelog.storage.cleaner)
        if upper is not None and seg.next_offset != upper:
            if seg.next_offset < recovery_point:
                raise CorruptLogError(
                    seg.log_path,
                    seg.size,
                    seg.next_offset,
                    f"segment ends at offset {seg.next_offset} but the next one starts at {upper}",
                )
            upper = None
        if upper is not None:
            seg.on_become_inactive()  # the final time index entry, as at its roll
        else:
            for later in segments[i + 1 :]:
                later.delete_files()
            del segments[i + 1 :]
        i += 1
    return epoch_starts


def prepare_txn_indexes(segments: list[LogSegment], recovery_point: int) -> int:
    """At open, after recovery: keep what the aborted-transaction indexes may be trusted
    with (txn_index invariant 3) and return the base offset of the first segment whose
    index must be rebuilt whole (``NEVER``: none). The replay then starts at or below
    both that segment and the recovery point, so it passes every marker whose entry is
    missing; entries already present make its appends no-ops."""
    rebuild_from = NEVER
    for seg in segments:
        index = seg.txn_index
        if (
            not index.rebuilding
            and index.entries
            and seg.next_offset <= recovery_point
            and index.entries[-1].last_offset >= seg.next_offset
        ):
            index.discard()  # an entry past the end of a trusted segment: not sound
        if index.rebuilding:
            rebuild_from = min(rebuild_from, seg.base_offset)
        else:
            # Written since the last flush, possibly for data a crash did not keep.
            index.truncate_to(recovery_point)
    return rebuild_from


def producer_batches_from(segments: list[LogSegment], start: int) -> Iterator[ProducerBatch]:
    """Producer batches at or after ``start`` (a batch boundary), from headers only
    (and the one record of each transaction marker)."""
    for seg in segments:
        if seg.next_offset <= start:
            continue
        position = 0
        if seg.base_offset < start:
            found = seg.find_batch(start)
            if found is None:
                continue
            position = found[0]
        for pos, header in seg.headers_from(position):
            if header.producer_id < 0:
                continue
            marker = None
            if header.is_control:
                marker = parse_end_txn_marker(seg.read_bytes(pos, header.size))
                if marker is None:
                    continue  # not a transaction marker: no effect (rule 9)
            yield ProducerBatch(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
                header.is_transactional,
                marker,
            )


def rebuild_producer_state(
    state: ProducerStateManager,
    local: LocalLog,
    *,
    log_start_offset: int,
    max_snapshot_offset: int,
    now_ms: int,
    expiration_ms: int,
) -> None:
    """Producer state = newest sound snapshot in [first segment base, bound] + replay of
    the batch headers after it, trimmed at the log start offset (producer_state rule 1).
    The replay's aborted transactions go to the indexes (no-ops where present)."""
    first_base = local.segments[0].base_offset
    # The snapshot at the first segment's base is always usable (a snapshot is only
    # kept while the log still holds every offset below it): it carries what the deleted
    # segments before it held, e.g. an ongoing transaction that started there, even
    # when the recovery point lags behind that base (retention outran the flushes).
    loaded = state.load_latest_snapshot(
        min_offset=first_base, max_offset=max(max_snapshot_offset, first_base)
    )
    aborted = state.update(
        producer_batches_from(local.segments, first_base if loaded is None else loaded)
    )
    local.index_aborted(aborted)
    state.truncate_head(log_start_offset)
    # Rule 5: what expired before a restart or a truncation stays expired.
    state.remove_expired(now_ms, expiration_ms)


def epoch_starts_from_headers(segments: list[LogSegment]) -> list[tuple[int, int, int]]:
    """``(epoch, its first offset, the last offset of that batch)`` of each new leader epoch
    in the batch headers: the leader epoch cache rebuilt when its checkpoint is lost."""
    starts: list[tuple[int, int, int]] = []
    latest = -1
    for seg in segments:
        for _, header in seg.headers_from(0):
            if header.partition_leader_epoch > latest:
                latest = header.partition_leader_epoch
                starts.append((latest, header.base_offset, header.last_offset))
    return starts


def load_epoch_cache(
    cache: LeaderEpochFileCache,
    epoch_starts: list[tuple[int, int, int]],
    segments: list[LogSegment],
    log_start_offset: int,
) -> None:
    """Rule 3 at open: the epochs recovery read join the cache (all of them, from every
    batch header, when its checkpoint was missing or unreadable), trimmed to the log."""
    log_end_offset = segments[-1].next_offset
    if not cache.loaded_from_file and log_end_offset > segments[0].base_offset:
        epoch_starts = epoch_starts_from_headers(segments)
    for epoch, offset, last_offset in epoch_starts:
        latest = cache.latest_epoch()
        # Only batches still readable (not wholly below the log start) count.
        if last_offset >= log_start_offset and (latest is None or epoch > latest):
            cache.assign(epoch, offset)
    cache.truncate_from_end(log_end_offset)
    cache.truncate_from_start(log_start_offset)
    if not cache.path.exists():
        cache.persist()


def restore_state(
    local: LocalLog,
    epoch_cache: LeaderEpochFileCache,
    producer_state: ProducerStateManager,
    epoch_starts: list[tuple[int, int, int]],
    *,
    log_start_offset: int,
    recovery_point: int,
    now_ms: int,
    expiration_ms: int,
) -> bool:
    """At open, after recovery: what the log keeps beside its segments, made to match
    them: the leader epoch cache (rule 3), the producer state (rule 7) and the
    aborted-transaction indexes (rule 9b). True when rebuilt indexes were renamed into
    place: the directory then needs an fsync (txn_index invariant 2)."""
    load_epoch_cache(epoch_cache, epoch_starts, local.segments, log_start_offset)
    # Producer state: snapshots of deleted segments or of a truncated tail are stale;
    # the newest sound one at or below the recovery point is loaded and the batches
    # after it replayed from their headers (producer_state rule 1 and 4).
    producer_state.delete_snapshots(below=local.segments[0].base_offset, above=local.log_end_offset)
    # Aborted-transaction indexes (rule 9b): the replay rebuilds what is not trusted.
    rebuild_from = prepare_txn_indexes(local.segments, recovery_point)
    rebuild_producer_state(
        producer_state,
        local,
        log_start_offset=log_start_offset,
        max_snapshot_offset=min(recovery_point, rebuild_from),
        now_ms=now_ms,
        expiration_ms=expiration_ms,
    )
    renamed = [seg for seg in local.segments if seg.txn_index.finish_rebuild()]
    return bool(renamed)


__all__ = [
    "FUTURE_DIR_SUFFIX",
    "epoch_starts_from_headers",
    "load_epoch_cache",
    "load_segments",
    "parse_topic_partition",
    "prepare_txn_indexes",
    "producer_batches_from",
    "rebuild_producer_state",
    "recover",
    "restore_state",
]
