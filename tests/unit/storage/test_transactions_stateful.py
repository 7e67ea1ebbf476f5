"""Hypothesis stateful test: transactions in the log against a plain model, and rule 1 of
``tidelog.storage.producer_state`` with transactions: the state kept incrementally equals
what a fresh open of the same files computes.

The model is the list of batches appended since the last full truncation (offsets, producer
id, transactional or not, marker or not), the log start offset and a high watermark that
only grows (a truncation lowers it to the log end, as a follower's is). From it, plainly:
the ongoing transactions (a transactional data batch opens one for its producer unless one
is open; a marker closes it), the completed ones, the LSO and the aborted list. Steps:
transactional, idempotent and plain batches and markers as leader (checked: the log's
answer must follow from the model where the model decides it) and as follower (unchecked),
rolls, truncations, DeleteRecords, retention, high watermark moves, and restarts: clean,
unclean, with a lost or corrupt ``.txnindex``, with a torn last batch. After every step the
log must agree with the model, and a copy of the directory opened afresh (a crash right
now: recovery from the log's recovery point) must agree with the log.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.unit.storage.test_transactions import origin_of
from tidelog.errors import ErrorCode
from tidelog.protocol.records import parse_header
from tidelog.storage.log import Log, LogConfig

from .test_transactions import TS, idem, marker, plain, stamped, txn

PIDS = (1, 2, 3)
_SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None
CONFIG = LogConfig(segment_bytes=500, index_interval_bytes=150, file_delete_delay_ms=0)


@dataclass(frozen=True)
class ModelBatch:
    base: int
    last: int
    pid: int  # -1: plain
    transactional: bool
    commit: bool | None  # None: data; else a marker


@dataclass(frozen=True)
class Completed:
    pid: int
    first: int
    marker: int
    commit: bool


class TxnLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="tidelog-txn-", dir=_SCRATCH))
        self.directory = self.tmp / "topic-0"
        self.log = Log.open(self.directory, CONFIG, now_ms=TS)
        self.batches: list[ModelBatch] = []
        self.start = 0
        self.base = 0  # where the log (re)started: the model's history begins there
        self.hw = 0
        self.ts = TS

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ------------------------------------------------------------------ the model

    @property
    def leo(self) -> int:
        return self.batches[-1].last + 1 if self.batches else self.base

    def fold(self) -> tuple[dict[int, int], list[Completed]]:
        """(producer id -> first offset of its ongoing transaction, completed ones)."""
        ongoing: dict[int, int] = {}
        completed: list[Completed] = []
        for b in self.batches:
            if b.pid < 0:
                continue
            if b.commit is not None:
                first = ongoing.pop(b.pid, None)
                if first is not None:
                    completed.append(Completed(b.pid, first, b.base, b.commit))
            elif b.transactional and b.pid not in ongoing:
                ongoing[b.pid] = b.base
        return ongoing, completed

    def expected_lso(self) -> int:
        ongoing, completed = self.fold()
        firsts = [*ongoing.values(), *(c.first for c in completed if c.marker >= self.hw)]
        if not firsts:
            return self.hw
        return min(self.hw, max(min(firsts), self.start))

    def expected_aborted(self, start: int, upper: int) -> list[tuple[int, int]]:
        _, completed = self.fold()
        aborted = [c for c in completed if not c.commit and c.marker >= start and c.first < upper]
        return [(c.pid, c.first) for c in sorted(aborted, key=lambda c: c.first)]

    def add(self, raw: bytes, pid: int, transactional: bool, commit: bool | None) -> None:
        header = parse_header(raw)
        base = self.leo
        self.batches.append(
            ModelBatch(base, base + header.last_offset_delta, pid, transactional, commit)
        )

    def client(self, pid: int) -> tuple[int, int]:
        """The producer's epoch and next sequence as the broker sees them (a client that
        resynchronised after truncations or retention, as KIP-360 clients do)."""
        entry = self.log.producer_state.last_entry(pid)
        if entry is None:
            return 0, 0
        return max(entry.producer_epoch, 0), entry.last_seq + 1

    # ------------------------------------------------------------------ appends

    @rule(pid=st.sampled_from(PIDS), n=st.integers(1, 3), as_follower=st.booleans())
    def transactional_data(self, pid: int, n: int, as_follower: bool) -> None:
        epoch, seq = self.client(pid)
        self.ts += 1
        raw = txn(pid, epoch, seq, n, ts=self.ts)
        if as_follower:
            self.log.append_as_follower(stamped(raw, self.leo), now_ms=self.ts)
        else:
            info = self.log.append_as_leader(
                raw, leader_epoch=0, now_ms=self.ts, origin=origin_of(raw)
            )
            assert info.error == ErrorCode.NONE, info
            assert not info.duplicate
            assert info.first_offset == self.leo
        self.add(raw, pid, True, None)

    @rule(pid=st.sampled_from(PIDS), as_follower=st.booleans())
    def idempotent_data(self, pid: int, as_follower: bool) -> None:
        epoch, seq = self.client(pid)
        self.ts += 1
        raw = idem(pid, epoch, seq, ts=self.ts)
        if as_follower:
            self.log.append_as_follower(stamped(raw, self.leo), now_ms=self.ts)
        else:
            info = self.log.append_as_leader(
                raw, leader_epoch=0, now_ms=self.ts, origin=origin_of(raw)
            )
            ongoing, _ = self.fold()
            if pid in ongoing:
                assert info.error == ErrorCode.INVALID_TXN_STATE, info
                return
            assert info.error == ErrorCode.NONE, info
        self.add(raw, pid, False, None)

    @rule(n=st.integers(1, 3))
    def plain_data(self, n: int) -> None:
        self.ts += 1
        raw = plain(n, ts=self.ts)
        self.log.append_as_leader(raw, leader_epoch=0, now_ms=self.ts, origin=origin_of(raw))
        self.add(raw, -1, False, None)

    @rule(
        pid=st.sampled_from(PIDS),
        commit=st.booleans(),
        epoch_change=st.sampled_from([0, 0, 0, 1, -1]),
        coordinator_change=st.sampled_from([0, 0, 0, 1, -1]),
        as_follower=st.booleans(),
    )
    def end_marker(
        self, pid: int, commit: bool, epoch_change: int, coordinator_change: int, as_follower: bool
    ) -> None:
        entry = self.log.producer_state.last_entry(pid)
        epoch = max(0, (entry.producer_epoch if entry else 0) + epoch_change)
        coordinator = max(0, (entry.coordinator_epoch if entry else 0) + coordinator_change)
        self.ts += 1
        raw = marker(pid, epoch, commit, coordinator, ts=self.ts)
        if as_follower:
            self.log.append_as_follower(stamped(raw, self.leo), now_ms=self.ts)
        else:
            info = self.log.append_as_leader(
                raw, leader_epoch=0, now_ms=self.ts, origin=origin_of(raw)
            )
            expected = ErrorCode.NONE
            if entry is not None and epoch < entry.producer_epoch:
                expected = ErrorCode.INVALID_PRODUCER_EPOCH
            elif entry is not None and coordinator < entry.coordinator_epoch:
                expected = ErrorCode.TRANSACTION_COORDINATOR_FENCED
            assert info.error == expected, (info, entry, epoch, coordinator)
            if expected != ErrorCode.NONE:
                return
        self.add(raw, pid, True, commit)

    # ------------------------------------------------------------------ log changes

    @rule(data=st.data())
    def advance_high_watermark(self, data: st.DataObject) -> None:
        self.hw = data.draw(st.integers(self.hw, self.leo), label="hw")

    @rule()
    def high_watermark_to_the_log_end(self) -> None:
        self.hw = self.leo

    @rule(pid=st.sampled_from(PIDS))
    def transaction_start(self, pid: int) -> None:
        """(More transactions: the generic rules open few.)"""
        self.transactional_data(pid, 1, as_follower=False)

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.leo), label="offset")
        self.log.truncate_to(offset)
        self.batches = [b for b in self.batches if b.last < offset]
        if self.leo < self.start:  # the cut batch straddled the log start
            self.batches, self.base = [], self.start
        self.hw = min(self.hw, self.leo)

    @precondition(lambda self: len(self.batches) > 30)
    @rule()
    def truncate_fully_and_start_at(self) -> None:
        offset = self.leo + 1
        self.log.truncate_fully_and_start_at(offset)
        self.batches, self.base, self.start, self.hw = [], offset, offset, offset

    @rule()
    def roll(self) -> None:
        self.log.roll(self.ts)

    @rule(data=st.data())
    def delete_records_before(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.hw), label="offset")
        self.log.delete_records_before(offset)
        self.start = max(self.start, offset)

    @rule(retention_bytes=st.integers(0, 1500))
    def retention_by_size(self, retention_bytes: int) -> None:
        self.log.update_config(
            LogConfig(
                segment_bytes=CONFIG.segment_bytes,
                index_interval_bytes=CONFIG.index_interval_bytes,
                file_delete_delay_ms=0,
                retention_bytes=retention_bytes,
            )
        )
        self.log.apply_retention(self.ts, high_watermark=self.hw)
        self.log.update_config(CONFIG)
        self.start = self.log.log_start_offset

    @rule()
    def flush(self) -> None:
        self.log.maybe_flush(self.ts)

    @rule(
        how=st.sampled_from(
            ["clean", "unclean", "unclean", "lost_txnindex", "corrupt_txnindex", "torn_tail"]
        ),
        data=st.data(),
    )
    def reopen(self, how: str, data: st.DataObject) -> None:
        event(f"reopen: {how}")
        if how == "clean":
            self.log.close()
            recovery_point = self.log.log_end_offset
        else:
            recovery_point = self.log.recovery_point
            self.log.close_without_flush()
        segments = sorted(self.directory.glob("*.txnindex"))
        if how in ("lost_txnindex", "corrupt_txnindex") and segments:
            victim = data.draw(st.sampled_from(segments), label="txnindex")
            if how == "lost_txnindex":
                victim.unlink()
            else:
                victim.write_bytes(victim.read_bytes() + b"\x00")
        last = self.batches[-1] if self.batches else None
        if how == "torn_tail" and last is not None and last.base >= max(recovery_point, self.start):
            active = sorted(self.directory.glob("*.log"))[-1]
            if int(active.name.split(".")[0]) <= last.base:
                os.truncate(active, active.stat().st_size - 3)
                self.batches.pop()
                self.hw = min(self.hw, self.leo)
        self.log = Log.open(
            self.directory,
            CONFIG,
            now_ms=self.ts,
            recovery_point=recovery_point,
            log_start_offset=self.start,
        )

    # ------------------------------------------------------------------ invariants

    def aborted_queries(self) -> list[tuple[int, int]]:
        mid = self.batches[len(self.batches) // 2].base if self.batches else self.start
        lso = self.expected_lso()
        return [(self.start, self.leo + 1), (self.start, lso), (max(mid, self.start), self.leo)]

    @invariant()
    def matches_model(self) -> None:
        log = self.log
        assert (log.log_start_offset, log.log_end_offset) == (self.start, self.leo)
        ongoing, completed = self.fold()
        event(f"ongoing transactions: {min(len(ongoing), 2)}")
        event(f"aborted transactions: {min(sum(not c.commit for c in completed), 3)}")
        below = min(ongoing.values(), default=self.start) < self.start
        event(f"a transaction from below the log start: {below}")
        assert dict(log.producer_state.ongoing_txns) == {f: p for p, f in ongoing.items()}
        assert log.last_stable_offset(self.hw) == self.expected_lso()
        for start, upper in self.aborted_queries():
            assert log.collect_aborted_transactions(start, upper) == self.expected_aborted(
                start, upper
            ), (start, upper)

    @invariant()
    def fresh_open_agrees(self) -> None:
        """Rule 1: the files hold everything the incremental state knows."""
        copy = self.tmp / "copy-0"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(self.directory, copy)
        fresh = Log.open(
            copy,
            CONFIG,
            now_ms=self.ts,
            recovery_point=self.log.recovery_point,
            log_start_offset=self.start,
        )
        try:
            log = self.log
            assert fresh.log_end_offset == log.log_end_offset
            assert dict(fresh.producer_state.producers) == dict(log.producer_state.producers)
            assert fresh.last_stable_offset(self.hw) == log.last_stable_offset(self.hw)
            assert fresh.first_unstable_offset() == log.first_unstable_offset()
            assert fresh.segment_base_offsets == log.segment_base_offsets
            assert [s.txn_index.entries for s in fresh._local.segments] == [
                s.txn_index.entries for s in log._local.segments
            ]
            for start, upper in self.aborted_queries():
                assert fresh.collect_aborted_transactions(
                    start, upper
                ) == log.collect_aborted_transactions(start, upper)
        finally:
            fresh.close()
            shutil.rmtree(copy, ignore_errors=True)


TxnLogMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestTxnLogStateful = TxnLogMachine.TestCase
