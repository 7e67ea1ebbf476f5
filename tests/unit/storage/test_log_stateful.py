"""Hypothesis stateful test: the log against a plain in-memory model.

The model is a list of stamped batches (bytes), the log start offset and a pure
``LeaderEpochCache``. Every step (leader/follower appends, reads, truncations, rolls,
retention, DeleteRecords, flushes, clean and unclean close/reopen) is applied to both, and
after each step the whole readable log must equal the model byte for byte.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kafka.record.default_records import DefaultRecordBatch

from tidelog.protocol.records import parse_header, stamp_batch
from tidelog.replication.epoch import LeaderEpochCache
from tidelog.storage.log import Log, LogConfig

from .batches import build_batch, read_all

#: Real batches of various record counts and sizes, built once (kafka-python is slow).
POOL = [
    build_batch(n, value_size=size, seed=i, base_ts=1_000 * i)
    for i, (n, size) in enumerate([(1, 40), (2, 90), (3, 150), (5, 60), (1, 700), (4, 200)])
]
#: (offset delta, timestamp) of each record of each pool batch, decoded by kafka-python.
POOL_RECORDS = [[(r.offset, r.timestamp) for r in DefaultRecordBatch(raw)] for raw in POOL]
CONFIG = LogConfig(segment_bytes=3000, index_interval_bytes=300, file_delete_delay_ms=0)


@dataclass
class ModelBatch:
    base: int
    last: int
    epoch: int
    data: bytes
    records: list[tuple[int, int]]  # (offset, timestamp)


def stamped(raw: bytes, base: int, epoch: int) -> bytes:
    buf = bytearray(raw)
    stamp_batch(buf, 0, base, epoch)
    return bytes(buf)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="tidelog-stateful-"))
        self.directory = self.tmp / "topic-0"
        self.now_ms = 0
        self.log = Log.open(self.directory, CONFIG, now_ms=self.now_ms)
        self.batches: list[ModelBatch] = []
        self.start = 0
        self.epochs = LeaderEpochCache()
        self.epoch = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------------ model helpers

    @property
    def leo(self) -> int:
        return self.batches[-1].last + 1 if self.batches else self.start

    def tick(self) -> int:
        self.now_ms += 1
        return self.now_ms

    def model_bytes(self) -> bytes:
        return b"".join(b.data for b in self.batches if b.last >= self.start)

    def model_append(self, pool_index: int, epoch: int) -> None:
        raw = POOL[pool_index]
        base = self.leo
        header = parse_header(raw)
        latest = self.epochs.latest_epoch()
        if latest is None or epoch > latest:
            self.epochs.assign(epoch, base)
        records = [(base + delta, ts) for delta, ts in POOL_RECORDS[pool_index]]
        self.batches.append(
            ModelBatch(
                base, base + header.last_offset_delta, epoch, stamped(raw, base, epoch), records
            )
        )

    def model_records(self) -> list[tuple[int, int]]:
        return [r for b in self.batches for r in b.records if r[0] >= self.start]

    # ------------------------------------------------------------------ rules

    @rule(picks=st.lists(st.integers(0, len(POOL) - 1), min_size=1, max_size=3), bump=st.booleans())
    def append_as_leader(self, picks: list[int], bump: bool) -> None:
        if bump:
            self.epoch += 1
        raw = b"".join(POOL[i] for i in picks)
        info = self.log.append_as_leader(raw, leader_epoch=self.epoch, now_ms=self.tick())
        first = self.leo
        for i in picks:
            self.model_append(i, self.epoch)
        assert info.first_offset == first
        assert info.last_offset == self.leo - 1
        assert info.num_batches == len(picks)
        assert info.size_bytes == len(raw)

    @rule(picks=st.lists(st.integers(0, len(POOL) - 1), min_size=1, max_size=3), bump=st.booleans())
    def append_as_follower(self, picks: list[int], bump: bool) -> None:
        if bump:
            self.epoch += 1
        raw = bytearray()
        base = self.leo
        for i in picks:
            raw += stamped(POOL[i], base, self.epoch)
            base += parse_header(POOL[i]).last_offset_delta + 1
        self.log.append_as_follower(bytes(raw), now_ms=self.tick())
        for i in picks:
            self.model_append(i, self.epoch)

    @rule(data=st.data(), max_bytes=st.integers(0, 4000), bounded=st.booleans())
    def read(self, data: st.DataObject, max_bytes: int, bounded: bool) -> None:
        fetch = data.draw(st.integers(self.start, self.leo), label="fetch_offset")
        max_offset = (
            data.draw(st.integers(fetch, self.leo), label="max_offset") if bounded else None
        )
        fetched = self.log.read(fetch, max_bytes, max_offset=max_offset)
        limit = self.leo if max_offset is None else max_offset
        candidates = [b for b in self.batches if b.last >= fetch and b.last < limit]
        if not candidates or fetch >= limit:
            assert fetched is None
            return
        assert fetched is not None
        got = fetched.read_bytes()
        # Whole batches from the one containing fetch_offset, within max_bytes (at least
        # one), ending at max_offset, a segment boundary, or where the next would not fit.
        taken: list[ModelBatch] = []
        size = 0
        for b in candidates:
            if taken and (
                size + len(b.data) > max_bytes or b.base in self.log.segment_base_offsets
            ):
                break
            taken.append(b)
            size += len(b.data)
        assert fetched.first_offset == taken[0].base
        assert got == b"".join(b.data for b in taken)

    @rule(timestamp=st.integers(-1, 6000))
    def offset_for_timestamp(self, timestamp: int) -> None:
        expected = next(((o, t) for o, t in self.model_records() if t >= timestamp), None)
        assert self.log.offset_for_timestamp(timestamp) == expected

    @rule()
    def latest_timestamp(self) -> None:
        records = self.model_records()
        expected = None
        if records:
            top = max(t for _, t in records)
            expected = next((o, t) for o, t in records if t == top)
        assert self.log.latest_timestamp() == expected

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.leo + 2), label="offset")
        self.log.truncate_to(offset)
        self.batches = [b for b in self.batches if b.last < offset]
        self.epochs.truncate_from_end(self.leo)

    @rule(delta=st.integers(0, 50))
    def truncate_fully_and_start_at(self, delta: int) -> None:
        offset = self.leo + delta
        self.log.truncate_fully_and_start_at(offset)
        self.batches = []
        self.start = offset
        self.epochs.clear()

    @rule()
    def roll(self) -> None:
        self.log.roll(self.tick())

    @rule(retention_bytes=st.integers(0, 6000))
    def retention_by_size(self, retention_bytes: int) -> None:
        size_before = self.log.size_bytes
        self.log.update_config(LogConfig(**{**_fields(CONFIG), "retention_bytes": retention_bytes}))
        deleted = self.log.apply_retention(self.tick())
        self.log.update_config(CONFIG)
        new_start = self.log.log_start_offset
        assert new_start >= self.start
        if deleted:
            assert new_start in {b.base for b in self.batches} | {self.leo}
            assert self.log.size_bytes < size_before
        self.set_start(new_start)

    @rule(data=st.data())
    def delete_records_before(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.leo), label="offset")
        self.log.delete_records_before(offset)
        self.set_start(offset)

    def set_start(self, offset: int) -> None:
        if offset > self.start:
            self.start = offset
            self.batches = [b for b in self.batches if b.last >= offset]
            self.epochs.truncate_from_start(offset)

    @rule()
    def flush(self) -> None:
        self.log.flush()
        assert self.log.recovery_point == self.leo

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        recovery_point = self.log.recovery_point
        start = self.log.log_start_offset
        if clean:
            self.log.close()
            recovery_point = self.log.recovery_point
        else:
            self.log.close_without_flush()
        self.log = Log.open(
            self.directory,
            CONFIG,
            now_ms=self.tick(),
            recovery_point=recovery_point,
            log_start_offset=start,
        )
        # Kafka's loader trims the cache to the log end: an epoch recorded at the log end
        # without data is forgotten (the controller re-announces leadership after a restart).
        self.epochs.truncate_from_end(self.leo)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def matches_model(self) -> None:
        assert self.log.log_end_offset == self.leo
        assert self.log.log_start_offset == self.start
        assert read_all(self.log) == self.model_bytes()
        assert self.log.leader_epoch_cache.entries == self.epochs.entries
        for b in self.batches:
            if b.base >= self.start:
                assert self.epochs.epoch_for_offset(b.base) == b.epoch

    @precondition(lambda self: True)
    @invariant()
    def epoch_file_matches(self) -> None:
        from tidelog.storage.checkpoints import LeaderEpochCheckpointFile

        on_disk = LeaderEpochCheckpointFile(self.log.leader_epoch_cache.path).read()
        assert tuple(on_disk) == self.epochs.entries


def _fields(config: LogConfig) -> dict[str, int]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


LogMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLogStateful = LogMachine.TestCase
