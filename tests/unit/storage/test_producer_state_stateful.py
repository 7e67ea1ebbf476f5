"""Hypothesis stateful test: log + producer state against a plain model.

The model is the list of batches in the log (with their producer fields) and the log start
offset. The expected producer state is recomputed from it from scratch at every step by the
obvious fold (per producer: the epoch of its latest batch and its last five batches of that
epoch, counting only batches at or after the log start), and the expected outcome of every
leader append by the rules of KIP-98 / Kafka 2.5+ written out plainly here. Steps: leader
appends (in order, retries of any earlier batch, gaps, stale and new epochs, sequences near
Int32 max), follower appends (unchecked), truncations, rolls, retention, DeleteRecords,
clean and unclean reopen, and damaged snapshot files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tidelog.errors import ErrorCode
from tidelog.protocol.records import parse_header
from tidelog.storage.log import Log, LogConfig
from tidelog.storage.producer_state import BatchMetadata, ProducerStateEntry

from .batches import read_all
from .test_producer_state import TS, pbatch, plain, stamped

INT32_MAX = 2**31 - 1
PIDS = (1, 2)
_SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None
CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=200, file_delete_delay_ms=0)


@dataclass(frozen=True)
class ModelBatch:
    base: int
    last: int
    pid: int  # -1: plain
    epoch: int
    seq: int
    ts: int
    data: bytes


def wrap(seq: int, inc: int) -> int:
    """Sequence arithmetic modulo 2**31 (what Kafka's incrementSequence amounts to)."""
    return (seq + inc) % (INT32_MAX + 1)


def expected_state(batches: list[ModelBatch], start: int) -> dict[int, ProducerStateEntry]:
    state: dict[int, tuple[int, list[BatchMetadata]]] = {}
    for b in batches:
        if b.pid < 0 or b.last < start:
            continue
        meta = BatchMetadata(b.seq, wrap(b.seq, b.last - b.base), b.base, b.last, b.ts)
        epoch, kept = state.get(b.pid, (None, []))
        kept = kept if epoch == b.epoch else []
        state[b.pid] = (b.epoch, [*kept, meta][-5:])
    return {pid: ProducerStateEntry(pid, e, tuple(ms)) for pid, (e, ms) in state.items()}


class ProducerLogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # tmpfs when there is one: the log fsyncs on every roll and flush, and the machine's
        # disk is shared; the behaviour under test does not depend on the medium.
        self.tmp = Path(tempfile.mkdtemp(prefix="tidelog-producer-", dir=_SCRATCH))
        self.directory = self.tmp / "topic-0"
        self.log = Log.open(self.directory, CONFIG, now_ms=TS)
        self.batches: list[ModelBatch] = []
        self.start = 0
        self.ts = TS
        #: producers whose state the log start removed and that have not appended since
        self.evicted: set[int] = set()
        #: ... of which those evicted since the last reopen (the broker must still know)
        self.evicted_since_reopen: set[int] = set()
        self.sent: list[tuple[int, int, int, int]] = []  # (pid, epoch, seq, n) ever sent
        #: each producer's own view: (epoch, next sequence) after its last accepted batch
        self.client: dict[int, tuple[int, int]] = {}

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def leo(self) -> int:
        return self.batches[-1].last + 1 if self.batches else self.start

    def state(self) -> dict[int, ProducerStateEntry]:
        return expected_state(self.batches, self.start)

    def add(self, raw: bytes, pid: int, epoch: int, seq: int) -> None:
        header = parse_header(raw)
        base = self.leo
        self.batches.append(
            ModelBatch(
                base,
                base + header.last_offset_delta,
                pid,
                epoch,
                seq,
                header.max_timestamp,
                stamped(raw, base, 0),
            )
        )
        self.evicted.discard(pid)
        self.evicted_since_reopen.discard(pid)
        if pid >= 0:
            self.client[pid] = (epoch, wrap(seq, header.last_offset_delta + 1))

    def set_start(self, offset: int) -> None:
        before = set(self.state())
        self.start = max(self.start, offset)
        self.batches = [b for b in self.batches if b.last >= self.start]
        gone = before - set(self.state())
        self.evicted |= gone
        self.evicted_since_reopen |= gone

    # ------------------------------------------------------------------ appends

    @rule(
        pid=st.sampled_from(PIDS),
        epoch_change=st.sampled_from([0] * 8 + [1, -1]),
        seq_mode=st.sampled_from(["next"] * 6 + ["zero", "gap", "retry", "retry", "near_max"]),
        n=st.integers(1, 3),
        data=st.data(),
    )
    def leader_append(
        self, pid: int, epoch_change: int, seq_mode: str, n: int, data: st.DataObject
    ) -> None:
        entry = self.state().get(pid)
        # The producer continues from its own view, which truncations and retention may
        # have made stale (then it meets a gap or an unknown producer id, as in Kafka).
        client_epoch, seq = self.client.get(pid, (0, 0))
        epoch = max(0, client_epoch + epoch_change)
        if epoch != client_epoch:
            seq = 0
        if seq_mode == "zero":
            seq = 0
        elif seq_mode == "gap":
            seq = wrap(seq, data.draw(st.integers(1, 3), label="gap"))
        elif seq_mode == "near_max":
            seq = INT32_MAX - data.draw(st.integers(0, 2), label="below max")
        elif seq_mode == "retry" and self.sent:
            # Mostly one of the last few requests (a retry in flight), sometimes older.
            recent = data.draw(st.booleans(), label="recent")
            pool = self.sent[-6:] if recent else self.sent
            pid, epoch, seq, n = data.draw(st.sampled_from(pool), label="retry")
            entry = self.state().get(pid)
        self.sent.append((pid, epoch, seq, n))
        self.ts += 1
        raw = pbatch(pid, epoch, seq, n, ts=self.ts)
        info = self.log.append_as_leader(raw, leader_epoch=0, now_ms=self.ts)

        last_seq = wrap(seq, n - 1)
        if entry is not None and entry.producer_epoch == epoch:
            dup = next(
                (m for m in entry.batches if (m.first_seq, m.last_seq) == (seq, last_seq)), None
            )
            if dup is not None:
                assert info.duplicate
                assert (info.first_offset, info.last_offset) == (dup.first_offset, dup.last_offset)
                assert info.error == ErrorCode.NONE
                return
        assert not info.duplicate
        if entry is None:
            expected = ErrorCode.NONE
            if seq != 0 and pid in self.evicted:
                # The removal hint lives in memory: after a restart the broker may have
                # forgotten it and accept, as Kafka 2.5+ always does.
                assert info.error in (ErrorCode.NONE, ErrorCode.UNKNOWN_PRODUCER_ID)
                if pid in self.evicted_since_reopen:
                    assert info.error == ErrorCode.UNKNOWN_PRODUCER_ID
                expected = info.error
        elif epoch < entry.producer_epoch:
            expected = ErrorCode.INVALID_PRODUCER_EPOCH
        elif epoch > entry.producer_epoch:
            expected = ErrorCode.NONE if seq == 0 else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        else:
            follows = seq == entry.last_seq + 1 or (seq == 0 and entry.last_seq == INT32_MAX)
            expected = ErrorCode.NONE if follows else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert info.error == expected, (info, entry, (pid, epoch, seq, n))
        if expected == ErrorCode.NONE:
            assert info.first_offset == self.leo
            self.add(raw, pid, epoch, seq)
        else:
            assert info.first_offset == -1

    @rule(n=st.integers(1, 3))
    def leader_append_plain(self, n: int) -> None:
        raw = plain(n)
        info = self.log.append_as_leader(raw, leader_epoch=0, now_ms=self.ts)
        assert info.first_offset == self.leo
        self.add(raw, -1, -1, -1)

    @rule(
        pid=st.sampled_from((*PIDS, -1)),
        epoch_change=st.sampled_from([0, 0, 0, 1, -1]),
        seq_change=st.sampled_from([0, 0, 0, 1, 5, -1]),
        n=st.integers(1, 3),
    )
    def follower_append(self, pid: int, epoch_change: int, seq_change: int, n: int) -> None:
        # Whatever the leader accepted, mostly in order, sometimes not (never checked here).
        client_epoch, seq = self.client.get(pid, (0, 0))
        epoch = max(0, client_epoch + epoch_change)
        # -1: jump close to Int32 max so the leader's next appends wrap around.
        seq = INT32_MAX - n if seq_change < 0 else wrap(seq, seq_change)
        self.ts += 1
        raw = plain(n) if pid < 0 else pbatch(pid, epoch, seq, n, ts=self.ts)
        self.log.append_as_follower(stamped(raw, self.leo, 0), now_ms=self.ts)
        self.add(raw, pid, epoch, seq)

    # ------------------------------------------------------------------ log changes

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.leo + 1), label="offset")
        before = set(self.state())
        self.log.truncate_to(offset)
        self.batches = [b for b in self.batches if b.last < offset]
        # A producer whose remaining batches all lie below the log start (still in the
        # segment files) is rebuilt and then trimmed by the log start: the broker may keep
        # its removal hint (UNKNOWN_PRODUCER_ID) or not, as for any eviction.
        self.evicted |= before - set(self.state())

    @rule(delta=st.integers(0, 5))
    def truncate_fully_and_start_at(self, delta: int) -> None:
        offset = self.leo + delta
        self.log.truncate_fully_and_start_at(offset)
        self.batches = []
        self.start = offset

    @rule()
    def roll(self) -> None:
        self.log.roll(self.ts)

    @rule(retention_bytes=st.integers(0, 2000))
    def retention_by_size(self, retention_bytes: int) -> None:
        self.log.update_config(
            LogConfig(
                segment_bytes=CONFIG.segment_bytes,
                index_interval_bytes=CONFIG.index_interval_bytes,
                file_delete_delay_ms=0,
                retention_bytes=retention_bytes,
            )
        )
        self.log.apply_retention(self.ts)
        self.log.update_config(CONFIG)
        self.set_start(self.log.log_start_offset)

    @rule(data=st.data())
    def delete_records_before(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, self.leo), label="offset")
        self.log.delete_records_before(offset)
        self.set_start(offset)

    @rule()
    def flush(self) -> None:
        self.log.maybe_flush(self.ts)

    @rule(clean=st.booleans(), damage=st.sampled_from(["none", "none", "latest", "all"]))
    def reopen(self, clean: bool, damage: str) -> None:
        recovery_point = self.log.recovery_point
        if clean:
            self.log.close()
            recovery_point = self.log.recovery_point
        else:
            self.log.close_without_flush()
        snaps = sorted(self.directory.glob("*.snapshot"))
        for path in snaps[-1:] if damage == "latest" else snaps if damage == "all" else []:
            raw = bytearray(path.read_bytes())
            raw[-1] ^= 0x01
            path.write_bytes(bytes(raw))
        self.log = Log.open(
            self.directory,
            CONFIG,
            now_ms=self.ts,
            recovery_point=recovery_point,
            log_start_offset=self.start,
        )
        self.evicted_since_reopen = set()

    # ------------------------------------------------------------------ invariants

    @invariant()
    def matches_model(self) -> None:
        assert self.log.log_end_offset == self.leo
        assert self.log.log_start_offset == self.start
        assert read_all(self.log) == b"".join(b.data for b in self.batches if b.last >= self.start)
        assert dict(self.log.producer_state.producers) == self.state()

    @invariant()
    def snapshots_within_the_log(self) -> None:
        offsets = [int(p.name.split(".")[0]) for p in self.directory.glob("*.snapshot")]
        first_base = self.log.segment_base_offsets[0]
        assert all(first_base <= o <= self.leo for o in offsets), (offsets, first_base, self.leo)


ProducerLogMachine.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestProducerLogStateful = ProducerLogMachine.TestCase
