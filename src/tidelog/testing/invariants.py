"""The simulator's invariant checker: the replication guarantees, checked after every event.

The checker keeps, per partition, the *committed history*: the record id at every offset
below the highest HW any replica has reported. Every guarantee reduces to it:

- **log matching** — any two replicas agree below the smaller of their HWs. Equivalent, and
  cheaper: every replica agrees with the committed history below its own HW. Checked
  incrementally on each HW move and on each append below the committed length.
- **durability** — a record acknowledged with acks=all (HW passed it with |ISR| >=
  ``min.insync.replicas``) is in the committed history; it is lost if a leader is elected
  without it, or if any replica overwrites it.
- **no phantom reads** (seed 003) — every offset a consumer read is in the committed history
  and never changes; a consumer positioned past the leader's log end is reading a phantom.
- **single leader per epoch, epochs only grow**; **HW <= LEO**; the leader's HW never goes
  back within its leadership.
- **no truncation below a replica's own HW** — committed data is never cut.

With unclean leader election the first three are *expected* to break: the checker then
reports exactly which acknowledged and which consumed records were lost, adopts the new
leader's log as the committed history from there on, and carries on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tidelog.model import TopicPartition


@dataclass(frozen=True, slots=True)
class Violation:
    time_ms: int
    kind: str
    message: str

    def __str__(self) -> str:
        return f"[t={self.time_ms}ms] {self.kind}: {self.message}"


@dataclass(frozen=True, slots=True)
class LostRecord:
    """An acknowledged (acks=all) record that a leader election dropped."""

    topic_partition: TopicPartition
    offset: int
    record_id: int
    time_ms: int


@dataclass(slots=True)
class _PartitionHistory:
    committed: list[int] = field(default_factory=list)
    acked: dict[int, int] = field(default_factory=dict)  # offset -> record id (acks=all)
    consumed: dict[int, int] = field(default_factory=dict)  # offset -> record id
    leaders: dict[int, int] = field(default_factory=dict)  # leader epoch -> broker


class InvariantChecker:
    """Fed by the simulator; collects :class:`Violation` values (never raises)."""

    __slots__ = (
        "_checked",
        "_histories",
        "_leader_hw",
        "lost_acked",
        "max_violations",
        "violations",
    )

    def __init__(self, max_violations: int = 100) -> None:
        self._histories: dict[TopicPartition, _PartitionHistory] = {}
        # (broker, tp) -> how far this replica's log was compared with the committed history
        self._checked: dict[tuple[int, TopicPartition], int] = {}
        # (broker, tp) -> (leadership term key, last HW) for leader HW monotonicity
        self._leader_hw: dict[tuple[int, TopicPartition], tuple[tuple[int, int], int]] = {}
        self.violations: list[Violation] = []
        self.lost_acked: list[LostRecord] = []
        self.max_violations = max_violations

    def _h(self, tp: TopicPartition) -> _PartitionHistory:
        h = self._histories.get(tp)
        if h is None:
            h = self._histories[tp] = _PartitionHistory()
        return h

    def fail(self, now_ms: int, kind: str, message: str) -> None:
        if len(self.violations) < self.max_violations:
            self.violations.append(Violation(now_ms, kind, message))

    @property
    def ok(self) -> bool:
        return not self.violations

    def committed(self, tp: TopicPartition) -> tuple[int, ...]:
        return tuple(self._h(tp).committed)

    def acked(self, tp: TopicPartition) -> dict[int, int]:
        return dict(self._h(tp).acked)

    def consumed(self, tp: TopicPartition) -> dict[int, int]:
        return dict(self._h(tp).consumed)

    # ---- events ---------------------------------------------------------------------

    def on_leader_append(
        self, now_ms: int, broker: int, tp: TopicPartition, offset: int, record_id: int
    ) -> None:
        """The controller's current leader appended ``record_id`` at ``offset``. (A stale
        leader or its followers may write below the committed length: that tail is not
        committed and gets truncated; only the HW checks judge them.)"""
        committed = self._h(tp).committed
        if offset < len(committed) and committed[offset] != record_id:
            self.fail(
                now_ms,
                "log-matching",
                f"leader {broker} wrote record {record_id} at {tp}@{offset}, "
                f"where record {committed[offset]} was committed{self._tags(tp, offset)}",
            )

    def on_truncate(
        self, now_ms: int, broker: int, tp: TopicPartition, new_end: int, high_watermark: int
    ) -> None:
        if new_end < high_watermark:
            self.fail(
                now_ms,
                "truncation-below-hw",
                f"broker {broker} truncated {tp} to {new_end}, below its HW {high_watermark}",
            )
        key = (broker, tp)
        if self._checked.get(key, 0) > new_end:
            self._checked[key] = new_end

    def on_replica_deleted(self, broker: int, tp: TopicPartition) -> None:
        """``broker`` deleted its replica of ``tp`` (reassignment moved it away): a replica it
        hosts later starts from an empty log, checked from offset 0 again."""
        self._checked.pop((broker, tp), None)
        self._leader_hw.pop((broker, tp), None)

    def on_high_watermark(
        self,
        now_ms: int,
        broker: int,
        tp: TopicPartition,
        high_watermark: int,
        log: Sequence[int],
        *,
        leader_term: tuple[int, int] | None,
    ) -> None:
        """A replica's HW is now ``high_watermark`` over ``log`` (its record ids).
        ``leader_term`` (incarnation, leader epoch) when the replica is the leader."""
        if high_watermark > len(log):
            self.fail(
                now_ms, "hw-above-leo", f"broker {broker} {tp} HW {high_watermark} > LEO {len(log)}"
            )
            return
        key = (broker, tp)
        if leader_term is not None:
            previous = self._leader_hw.get(key)
            if previous is not None and previous[0] == leader_term and high_watermark < previous[1]:
                self.fail(
                    now_ms,
                    "leader-hw-backwards",
                    f"leader {broker} {tp} HW went from {previous[1]} to {high_watermark}",
                )
            self._leader_hw[key] = (leader_term, high_watermark)
        checked = self._checked.get(key, 0)
        if high_watermark <= checked:
            return
        committed = self._h(tp).committed
        for offset in range(checked, high_watermark):
            if offset < len(committed):
                if committed[offset] != log[offset]:
                    self.fail(
                        now_ms,
                        "log-matching",
                        f"broker {broker} has record {log[offset]} at {tp}@{offset} below its "
                        f"HW {high_watermark}, committed is {committed[offset]}"
                        f"{self._tags(tp, offset)}",
                    )
                    return
            else:
                committed.append(log[offset])
        self._checked[key] = high_watermark

    def on_make_leader(
        self,
        now_ms: int,
        broker: int,
        tp: TopicPartition,
        leader_epoch: int,
        log: Sequence[int],
        *,
        authoritative: bool,
    ) -> None:
        """``broker`` became leader of ``tp`` at ``leader_epoch``. ``authoritative`` when that
        is still the controller's choice (a late, already superseded LeaderAndIsr makes a
        short-lived stale leader that the next one fences; it is not held to the history)."""
        h = self._h(tp)
        other = h.leaders.get(leader_epoch)
        if other is not None and other != broker:
            self.fail(
                now_ms,
                "two-leaders",
                f"{tp} epoch {leader_epoch} has leaders {other} and {broker}",
            )
        h.leaders[leader_epoch] = broker
        if authoritative:
            self._check_leader_has_history(now_ms, broker, tp, log)

    def _check_leader_has_history(
        self, now_ms: int, broker: int, tp: TopicPartition, log: Sequence[int]
    ) -> None:
        h = self._h(tp)
        first_bad = min(len(log), len(h.committed))
        for offset in range(first_bad):
            if log[offset] != h.committed[offset]:
                first_bad = offset
                break
        if first_bad >= len(h.committed):
            return
        lost_acked = sorted((o, r) for o, r in h.acked.items() if o >= first_bad)
        lost_read = sorted((o, r) for o, r in h.consumed.items() if o >= first_bad)
        for o, r in lost_acked:
            self.lost_acked.append(LostRecord(tp, o, r, now_ms))
        self.fail(
            now_ms,
            "committed-data-lost",
            f"broker {broker} leads {tp} with committed offsets {first_bad}.."
            f"{len(h.committed) - 1} missing or different; acks=all records lost "
            f"(offset, id): {lost_acked}; consumed records now phantom: {lost_read}",
        )
        # The new leader's log is the truth from here on (unclean election, or old rules).
        del h.committed[first_bad:]
        for o in [o for o in h.acked if o >= first_bad]:
            del h.acked[o]
        for o in [o for o in h.consumed if o >= first_bad]:
            del h.consumed[o]
        for key, checked in self._checked.items():
            if key[1] == tp and checked > first_bad:
                self._checked[key] = first_bad

    def on_acked(self, now_ms: int, tp: TopicPartition, offset: int, record_id: int) -> None:
        """A produce with acks=all was answered NONE (HW passed it, ISR >= min)."""
        h = self._h(tp)
        if offset >= len(h.committed) or h.committed[offset] != record_id:
            self.fail(now_ms, "ack-uncommitted", f"record {record_id} acked at {tp}@{offset}")
        h.acked[offset] = record_id

    def on_consumed(self, now_ms: int, tp: TopicPartition, offset: int, record_id: int) -> None:
        h = self._h(tp)
        if offset >= len(h.committed):
            self.fail(now_ms, "phantom-read", f"consumer read {tp}@{offset} above committed")
        elif h.committed[offset] != record_id:
            self.fail(
                now_ms,
                "phantom-read",
                f"consumer read record {record_id} at {tp}@{offset}, committed is "
                f"{h.committed[offset]}",
            )
        previous = h.consumed.setdefault(offset, record_id)
        if previous != record_id:
            self.fail(
                now_ms,
                "phantom-read",
                f"{tp}@{offset} read as {previous} then as {record_id}",
            )

    def on_consumer_out_of_range(
        self, now_ms: int, tp: TopicPartition, position: int, leader: int, leader_leo: int
    ) -> None:
        self.fail(
            now_ms,
            "phantom-read",
            f"consumer at {tp}@{position} (read before) but leader {leader} ends at {leader_leo}",
        )

    def final_check(self, now_ms: int, tp: TopicPartition, leader: int, log: Sequence[int]) -> None:
        """After the settle phase: the leader holds every acknowledged record."""
        for offset, record_id in sorted(self._h(tp).acked.items()):
            if offset >= len(log) or log[offset] != record_id:
                self.lost_acked.append(LostRecord(tp, offset, record_id, now_ms))
                self.fail(
                    now_ms,
                    "acked-lost",
                    f"final leader {leader} lacks acked record {record_id} at {tp}@{offset}",
                )

    def _tags(self, tp: TopicPartition, offset: int) -> str:
        h = self._h(tp)
        tags = [
            name
            for name, present in (
                ("acked acks=all", offset in h.acked),
                ("consumed", offset in h.consumed),
            )
            if present
        ]
        return f" ({', '.join(tags)})" if tags else ""
