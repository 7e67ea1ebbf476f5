"""The transactional checker (issue 19): judge what the transactional producers were told
against what read_committed consumers read. Pure: histories in, findings out.

Inputs: every transaction (``Txn``: values, the outcome its client reported, when
``commit_transaction()`` was first called), every record the read_committed consumers read
during the run (``Read``, with its ``time.monotonic()``), the final read_committed read of
every partition up to its last stable offset once everything healed and every producer
stopped, and (for the figures) the final read_uncommitted read. Findings (lists of
human-readable lines, empty when fine):

- (a) ``lost``: a value of a transaction its client saw committed that the final
  read_committed read does not hold; ``duplicated``: a value stored at more than one offset
  (transactional producers are idempotent: always a failure); ``moved``: a committed value
  stored at another offset than its delivery report said;
- (b) ``aborted_visible``: a value of an aborted transaction (``abort_transaction()``
  returned) or of a fenced zombie's read by a read_committed consumer, during the run or in
  the final read;
- (c) ``partial``: a transaction (whatever its outcome, indeterminate ones included) of
  which the final read holds some values but not all;
- (d) ``early``: a read_committed consumer read a value of transaction T before T's
  ``commit_transaction()`` was called, or a value of a transaction whose commit was never
  called (and that was not aborted: those are (b)) is visible;
- (e) ``not_fenced``: a zombie (a producer whose transactional id a successor had
  initialised) whose ``commit_transaction()`` returned;
- ``unknown``: a value no transaction wrote; ``inconsistent``: one offset, different
  values for different readers; ``vanished``: a value a consumer read at an offset the
  final read does not hold it at; ``reordered``: a consumer reading a partition's offsets
  backwards, or one transaction's values in a partition stored out of produce order;
- ``incomplete``: the final read did not reach its end, or a partition's last stable
  offset is below its high watermark once every producer stopped (a transaction left
  hanging); ``divergent``, ``stuck`` and ``client_visible`` are filled by the runner
  (replicas differing below the HW, a fault the cluster did not heal from or a call that
  never completed, an error an application would stop on).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tidelog.testing.faults.txn_workload import ABORTED, COMMITTED, FENCED, OUTCOMES, Txn
from tidelog.testing.faults.workload import Read

#: Values shown per finding line at most.
_SHOWN = 5


@dataclass(slots=True)
class TxnFindings:
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    aborted_visible: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    early: list[str] = field(default_factory=list)
    not_fenced: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    inconsistent: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    divergent: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    client_visible: list[str] = field(default_factory=list)
    #: Transactions per outcome (committed, aborted, indeterminate, fenced).
    outcomes: Counter[str] = field(default_factory=Counter)
    #: Values per outcome of their transaction.
    values: Counter[str] = field(default_factory=Counter)
    committed_values_lost: int = 0
    aborted_values_visible: int = 0
    #: Zombie scenarios run / fenced (their commit failed).
    zombies: int = 0
    zombies_fenced: int = 0
    #: Indeterminate transactions the final read holds entirely / not at all.
    indeterminate_visible: int = 0
    indeterminate_invisible: int = 0
    #: Values of aborted or fenced transactions found in the log by read_uncommitted (what
    #: read_committed had to skip: the proof that check (b) was not vacuous).
    aborted_values_in_log: int = 0
    #: Records read by the read_committed consumers during the run / in the final read.
    reads: int = 0
    final_reads: int = 0

    @property
    def failures(self) -> dict[str, list[str]]:
        return {
            name: items
            for name, items in (
                ("lost", self.lost),
                ("duplicated", self.duplicated),
                ("moved", self.moved),
                ("aborted_visible", self.aborted_visible),
                ("partial", self.partial),
                ("early", self.early),
                ("not_fenced", self.not_fenced),
                ("unknown", self.unknown),
                ("inconsistent", self.inconsistent),
                ("vanished", self.vanished),
                ("reordered", self.reordered),
                ("incomplete", self.incomplete),
                ("divergent", self.divergent),
                ("stuck", self.stuck),
                ("client_visible", self.client_visible),
            )
            if items
        }

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self, limit: int = 10) -> str:
        counts = ", ".join(f"{o} {self.outcomes[o]}" for o in OUTCOMES)
        lines = [
            f"transactions: {counts}; committed values lost {self.committed_values_lost}, "
            f"aborted values visible {self.aborted_values_visible}, zombies fenced "
            f"{self.zombies_fenced}/{self.zombies}, client-visible errors "
            f"{len(self.client_visible)}"
        ]
        for name, items in self.failures.items():
            lines.append(f"{name}: {len(items)}")
            lines.extend(f"  {item}" for item in items[:limit])
        return "\n".join(lines)


def _name(t: Txn) -> str:
    return f"{t.transactional_id} txn {t.number} ({t.outcome})"


def _shown(values: Sequence[bytes]) -> str:
    more = f" and {len(values) - _SHOWN} more" if len(values) > _SHOWN else ""
    return ", ".join(v.decode(errors="replace") for v in values[:_SHOWN]) + more


def check_transactions(
    txns: Sequence[Txn],
    reads: Sequence[Read],
    final: Sequence[Read],
    *,
    uncommitted: Sequence[Read] = (),
    ends: Mapping[int, int] | None = None,
    reached: Mapping[int, int] | None = None,
    high_watermarks: Mapping[int, int] | None = None,
) -> TxnFindings:
    """See the module docstring. ``ends``: the last stable offsets the final read aimed at,
    ``reached``: where it got; ``high_watermarks``: the partitions' HWs at the same time."""
    f = TxnFindings(reads=len(reads), final_reads=len(final))
    owner: dict[bytes, Txn] = {}
    for t in txns:
        f.outcomes[t.outcome] += 1
        f.values[t.outcome] += len(t.values)
        for v in t.values:
            owner[v] = t

    log: dict[tuple[int, int], bytes] = {}
    where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for r in final:
        log[(r.partition, r.offset)] = r.value
        where[r.value].append((r.partition, r.offset))

    _check_committed(f, txns, owner, where)
    _check_aborted(f, txns, reads, uncommitted, where)
    _check_all_or_nothing(f, txns, where)
    _check_not_early(f, reads, final, owner)
    _check_zombies(f, txns)
    _check_reads(f, reads, final, owner, log)
    _check_stored_order(f, txns, where)
    _check_final_read_complete(f, ends, reached, high_watermarks)
    return f


def _check_committed(
    f: TxnFindings,
    txns: Sequence[Txn],
    owner: Mapping[bytes, Txn],
    where: Mapping[bytes, list[tuple[int, int]]],
) -> None:
    """(a) Committed: every value once, where its delivery report said."""
    for t in txns:
        if t.outcome != COMMITTED:
            continue
        missing = [v for v in t.values if v not in where]
        if missing:
            f.committed_values_lost += len(missing)
            f.lost.append(
                f"{_name(t)}: {len(missing)} of {len(t.values)} values not in the final "
                f"read_committed read: {_shown(missing)}"
            )
        for v in t.values:
            if v in t.delivered and v in where and where[v][0] != t.delivered[v]:
                f.moved.append(
                    f"{_name(t)}: {v.decode()} delivered at {t.delivered[v]}, stored at {where[v]}"
                )
    for v, places in where.items():
        if len(places) > 1:
            who = _name(owner[v]) if v in owner else "no transaction"
            f.duplicated.append(f"{v.decode(errors='replace')} ({who}) at {places}")


def _check_aborted(
    f: TxnFindings,
    txns: Sequence[Txn],
    reads: Sequence[Read],
    uncommitted: Sequence[Read],
    where: Mapping[bytes, list[tuple[int, int]]],
) -> None:
    """(b) Aborted or fenced: never read by a read_committed consumer."""
    read_by: dict[bytes, list[Read]] = defaultdict(list)
    for r in reads:
        read_by[r.value].append(r)
    for t in txns:
        if t.outcome not in (ABORTED, FENCED):
            continue
        visible = [v for v in t.values if v in where]
        seen = [r for v in t.values for r in read_by.get(v, ())]
        f.aborted_values_visible += len(set(visible) | {r.value for r in seen})
        if visible:
            f.aborted_visible.append(
                f"{_name(t)}: {len(visible)} of {len(t.values)} values in the final "
                f"read_committed read: {_shown(visible)} at {[where[v][0] for v in visible][:3]}"
            )
        if seen:
            first = min(seen, key=lambda r: r.at)
            f.aborted_visible.append(
                f"{_name(t)}: read {len(seen)} times by read_committed consumers during the "
                f"run, first {first.value.decode()} by {first.reader} at "
                f"{first.partition}/{first.offset}"
            )
    in_log = {r.value for r in uncommitted}
    f.aborted_values_in_log = sum(
        1 for t in txns if t.outcome in (ABORTED, FENCED) for v in t.values if v in in_log
    )


def _check_all_or_nothing(
    f: TxnFindings, txns: Sequence[Txn], where: Mapping[bytes, list[tuple[int, int]]]
) -> None:
    """(c) All or nothing, whatever the outcome."""
    for t in txns:
        present = sum(1 for v in t.values if v in where)
        if 0 < present < len(t.values):
            absent = [v for v in t.values if v not in where]
            f.partial.append(
                f"{_name(t)}: {present} of {len(t.values)} values in the final read; "
                f"missing {_shown(absent)}"
            )
        elif t.outcome not in (COMMITTED, ABORTED, FENCED) and t.values:
            if present:
                f.indeterminate_visible += 1
            else:
                f.indeterminate_invisible += 1


def _check_not_early(
    f: TxnFindings, reads: Sequence[Read], final: Sequence[Read], owner: Mapping[bytes, Txn]
) -> None:
    """(d) Nothing visible before its commit was called (aborted ones are (b))."""
    for r in [*reads, *final]:
        writer = owner.get(r.value)
        if writer is None or writer.outcome in (ABORTED, FENCED):
            continue
        if writer.commit_called_at is None:
            f.early.append(
                f"{r.reader} read {r.value.decode()} at {r.partition}/{r.offset}: "
                f"{_name(writer)} never called commit_transaction()"
            )
        elif r.reader != "final" and r.at < writer.commit_called_at:
            f.early.append(
                f"{r.reader} read {r.value.decode()} at {r.partition}/{r.offset} "
                f"{writer.commit_called_at - r.at:.3f}s before {_name(writer)} called "
                "commit_transaction()"
            )


def _check_zombies(f: TxnFindings, txns: Sequence[Txn]) -> None:
    """(e) Zombies fenced."""
    for t in txns:
        if not t.zombie:
            continue
        f.zombies += 1
        if t.outcome == FENCED:
            f.zombies_fenced += 1
        elif t.outcome == COMMITTED:
            f.not_fenced.append(
                f"{_name(t)}: the zombie's commit_transaction() returned after a successor "
                "initialised its transactional id"
            )


def _check_reads(
    f: TxnFindings,
    reads: Sequence[Read],
    final: Sequence[Read],
    owner: Mapping[bytes, Txn],
    log: Mapping[tuple[int, int], bytes],
) -> None:
    """Every read: a known value, one value per offset, still there at the end, in order."""
    for r in [*reads, *final]:
        if r.value not in owner:
            f.unknown.append(f"{r.reader} read {r.value!r} at {r.partition}/{r.offset}")
    seen_at: dict[tuple[int, int], tuple[bytes, str]] = {}
    for r in [*reads, *final]:
        first_seen = seen_at.setdefault((r.partition, r.offset), (r.value, r.reader))
        if first_seen[0] != r.value:
            f.inconsistent.append(
                f"{r.partition}/{r.offset}: {first_seen[1]} read {first_seen[0]!r}, "
                f"{r.reader} read {r.value!r}"
            )
    for r in reads:
        if log.get((r.partition, r.offset)) != r.value:
            f.vanished.append(
                f"{r.reader} read {r.value.decode(errors='replace')} at "
                f"{r.partition}/{r.offset}; the final read has "
                f"{log.get((r.partition, r.offset))!r} there"
            )
    last: dict[tuple[str, int], int] = {}
    for r in [*reads, *final]:
        key = (r.reader, r.partition)
        if key in last and r.offset <= last[key]:
            f.reordered.append(f"{r.reader} read {r.partition}/{r.offset} after {last[key]}")
        last[key] = r.offset


def _check_stored_order(
    f: TxnFindings, txns: Sequence[Txn], where: Mapping[bytes, list[tuple[int, int]]]
) -> None:
    """A transaction's values are stored, per partition, in the order it produced them."""
    for t in txns:
        last_in: dict[int, tuple[int, bytes]] = {}
        for v in t.values:
            if v not in where:
                continue
            p, o = where[v][0]
            if p in last_in and o < last_in[p][0]:
                f.reordered.append(
                    f"{_name(t)}: {v.decode()} stored at {p}/{o}, before "
                    f"{last_in[p][1].decode()} at {p}/{last_in[p][0]} although produced after it"
                )
            last_in[p] = (o, v)


def _check_final_read_complete(
    f: TxnFindings,
    ends: Mapping[int, int] | None,
    reached: Mapping[int, int] | None,
    high_watermarks: Mapping[int, int] | None,
) -> None:
    """The final read reached every last stable offset, and no transaction was left open."""
    for p, end in sorted((ends or {}).items()):
        got = (reached or {}).get(p, 0)
        if got < end:
            f.incomplete.append(f"partition {p}: the final read reached {got} of {end}")
        hw = (high_watermarks or {}).get(p)
        if hw is not None and end < hw:
            f.incomplete.append(
                f"partition {p}: last stable offset {end} below the high watermark {hw} after "
                "every producer stopped (a transaction left open)"
            )
