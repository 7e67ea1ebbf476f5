"""The checker, in the spirit of Jepsen's Kafka checker: judge the histories, never trust
the system under test.

Inputs: every acknowledgement (``Ack``), every record any consumer read (``Read``), the
final read of every partition up to its high watermark after the last heal, and the
replicas' log dirs. Findings (each a list of human-readable lines, empty when fine):

- ``lost``: an acknowledged value found nowhere in the final log (acks=all with
  min.insync.replicas=2 promises this never happens while one ISR member survives: seed
  000, "只要任何时间 ISR 列表中都有至少一个节点存活，那么被提交的消息就永远不会丢失");
- ``moved``: an acknowledged value present, but not at the offset it was acknowledged at;
- ``vanished``: a value a consumer read at an offset that the final log holds no more (or
  holds something else at) - consumers only read below the HW, which is committed;
- ``inconsistent``: one offset holding different values for different readers;
- ``reordered``: a consumer that read a partition's offsets out of order, or one producer's
  values (sent one at a time per connection) stored out of their sending order;
- ``duplicated`` (reported separately, not a failure: producers retry without idempotence):
  a value stored at more than one offset;
- ``divergent``: replicas whose batches below the high watermark differ byte for byte;
- ``incomplete``: the final read did not get every offset below the high watermark;
- ``stuck`` (liveness, filled by the runner): a fault after which the cluster did not become
  healthy again (every broker up and in every ISR) within the heal timeout;
- ``client_visible`` (filled by the runner from the workload, issue 18): every error a
  client reported that an application would stop on (a non-retriable error in a delivery
  report, an exception from ``produce()``/``send()`` on the existing topic, a consumer's
  fatal error); retriable and timed-out deliveries are indeterminate, not failures.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.testing.faults.workload import Ack, Read

#: v2 batch header: baseOffset int64, batchLength int32, partitionLeaderEpoch int32,
#: magic int8, crc uint32, attributes int16, lastOffsetDelta int32 (KIP-98).
_BATCH_PREFIX = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23


@dataclass(slots=True)
class Findings:
    lost: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)
    inconsistent: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    divergent: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    #: Liveness: faults after which the cluster did not become healthy again.
    stuck: list[str] = field(default_factory=list)
    #: Errors a client reported that an application would stop on (one line each).
    client_visible: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    #: A non-idempotent producer's values stored out of sending order: reported, not a
    #: failure. librdkafka's max.in.flight=1 is per connection; across a leader change a
    #: batch still in flight to the old leader can be retried after a later batch that went
    #: to the new one. Only idempotence (KIP-98 sequence numbers) promises the order.
    producer_reordered: list[str] = field(default_factory=list)
    acknowledged: int = 0
    lost_count: int = 0
    lost_values: list[bytes] = field(default_factory=list)

    @property
    def failures(self) -> dict[str, list[str]]:
        return {
            name: items
            for name, items in (
                ("lost", self.lost),
                ("moved", self.moved),
                ("vanished", self.vanished),
                ("inconsistent", self.inconsistent),
                ("reordered", self.reordered),
                ("divergent", self.divergent),
                ("incomplete", self.incomplete),
                ("stuck", self.stuck),
                ("client_visible", self.client_visible),
            )
            if items
        }

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self, limit: int = 10) -> str:
        lines = [
            f"acknowledged {self.acknowledged}, lost {self.lost_count}, "
            f"client-visible errors {len(self.client_visible)}"
        ]
        informational = {
            "duplicated": self.duplicated,
            "producer_reordered (not idempotent, not a failure)": self.producer_reordered,
        }
        for name, items in {**self.failures, **informational}.items():
            if items:
                lines.append(f"{name}: {len(items)}")
                lines.extend(f"  {item}" for item in items[:limit])
        return "\n".join(lines)


def _seq(value: bytes) -> tuple[int, int] | None:
    """``p<producer>-<seq>`` -> (producer, seq)."""
    try:
        producer, seq = value[1:].split(b"-", 1)
        return int(producer), int(seq)
    except ValueError:
        return None


def check_histories(
    acks: Sequence[Ack],
    reads: Sequence[Read],
    final: Sequence[Read],
    high_watermarks: Mapping[int, int],
    *,
    producer_order_guaranteed: bool = True,
) -> Findings:
    f = Findings(acknowledged=len(acks))
    log: dict[tuple[int, int], bytes] = {}
    where: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for r in final:
        log[(r.partition, r.offset)] = r.value
        where[r.value].append((r.partition, r.offset))
    _check_complete(f, log, high_watermarks)
    _check_acknowledged(f, acks, log, where, high_watermarks)
    _check_one_value_per_offset(f, acks, reads, final)
    _check_reads(f, reads, log, high_watermarks)
    _check_producer_order(f.reordered if producer_order_guaranteed else f.producer_reordered, log)
    for v, places in where.items():
        if len(places) > 1:
            f.duplicated.append(f"{v!r} at {places}")
    return f


def _check_complete(
    f: Findings, log: Mapping[tuple[int, int], bytes], high_watermarks: Mapping[int, int]
) -> None:
    for p, hw in sorted(high_watermarks.items()):
        have = sum(1 for (q, _o) in log if q == p)
        if have < hw:
            # Offsets below the HW the final reader never got (compaction is off here).
            f.incomplete.append(f"partition {p}: final read got {have} of {hw} offsets")


def _check_acknowledged(
    f: Findings,
    acks: Sequence[Ack],
    log: Mapping[tuple[int, int], bytes],
    where: Mapping[bytes, list[tuple[int, int]]],
    high_watermarks: Mapping[int, int],
) -> None:
    """Every acknowledged value is in the final log at its offset: else moved or lost."""
    for a in acks:
        stored = log.get((a.partition, a.offset))
        if stored == a.value:
            continue
        if a.value in where:
            f.moved.append(
                f"{a.value!r} acknowledged at {a.partition}/{a.offset}, stored at "
                f"{where[a.value]} ({a.partition}/{a.offset} holds {stored!r})"
            )
        else:
            f.lost_count += 1
            f.lost_values.append(a.value)
            f.lost.append(
                f"{a.value!r} acknowledged at {a.partition}/{a.offset} (hw "
                f"{high_watermarks.get(a.partition)}), now {stored!r}"
            )


def _check_one_value_per_offset(
    f: Findings, acks: Sequence[Ack], reads: Sequence[Read], final: Sequence[Read]
) -> None:
    """One offset, one value: acks, every consumer's reads and the final log must agree."""
    seen: dict[tuple[int, int], tuple[bytes, str]] = {}
    for who, p, o, v in [
        *((f"ack p{a.producer}", a.partition, a.offset, a.value) for a in acks),
        *((r.reader, r.partition, r.offset, r.value) for r in reads),
        *(("final", r.partition, r.offset, r.value) for r in final),
    ]:
        first = seen.setdefault((p, o), (v, who))
        if first[0] != v:
            f.inconsistent.append(f"{p}/{o}: {first[1]} saw {first[0]!r}, {who} saw {v!r}")


def _check_reads(
    f: Findings,
    reads: Sequence[Read],
    log: Mapping[tuple[int, int], bytes],
    high_watermarks: Mapping[int, int],
) -> None:
    """A value read stays in the log below the final HW; each reader's offsets increase."""
    for r in reads:
        if (r.partition, r.offset) not in log and r.offset < high_watermarks.get(r.partition, 0):
            f.vanished.append(f"{r.reader} read {r.value!r} at {r.partition}/{r.offset}, gone")
        elif r.offset >= high_watermarks.get(r.partition, 0):
            f.vanished.append(
                f"{r.reader} read {r.value!r} at {r.partition}/{r.offset}, above the final "
                f"hw {high_watermarks.get(r.partition, 0)}"
            )

    last: dict[tuple[str, int], int] = {}
    for r in reads:
        key = (r.reader, r.partition)
        if key in last and r.offset <= last[key]:
            f.reordered.append(f"{r.reader} read {r.partition}/{r.offset} after {last[key]}")
        last[key] = r.offset


def _check_producer_order(out: list[str], log: Mapping[tuple[int, int], bytes]) -> None:
    """A producer's values, by their first copy in the log, keep its sending order (a
    retried batch's second copy is a duplicate, not a reordering); breaks go to ``out``."""
    last_seq: dict[tuple[int, int], tuple[int, int]] = {}
    stored_once: set[bytes] = set()
    for (p, o), v in sorted(log.items()):
        parsed = _seq(v)
        if parsed is None or v in stored_once:
            continue
        stored_once.add(v)
        producer, seq = parsed
        pkey = (p, producer)
        if pkey in last_seq and seq < last_seq[pkey][0]:
            out.append(
                f"partition {p}: producer {producer} seq {seq} at offset {o} after seq "
                f"{last_seq[pkey][0]} at offset {last_seq[pkey][1]}"
            )
        last_seq[pkey] = (max(seq, last_seq.get(pkey, (seq, o))[0]), o)


# --- replicas' logs ------------------------------------------------------------------------


def committed_batches(partition_dir: Path, high_watermark: int) -> list[bytes]:
    """Every batch of one replica whose base offset is below ``high_watermark``, byte for
    byte, read from its segment files (in offset order)."""
    batches: list[bytes] = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos + _BATCH_PREFIX.size <= len(data):
            base, length = _BATCH_PREFIX.unpack_from(data, pos)
            end = pos + _BATCH_PREFIX.size + length
            if length <= 0 or end > len(data):
                break  # a torn or preallocated tail: nothing committed lives there
            if base < high_watermark:
                batches.append(data[pos:end])
            pos = end
    return batches


def last_offset(batch: bytes) -> int:
    base, _length = _BATCH_PREFIX.unpack_from(batch, 0)
    (delta,) = _LAST_OFFSET_DELTA.unpack_from(batch, _LAST_OFFSET_DELTA_AT)
    return int(base) + int(delta)


def check_replicas(
    log_dirs: Mapping[int, Path],
    topic: str,
    high_watermarks: Mapping[int, int],
    replicas: Mapping[int, Iterable[int]],
) -> list[str]:
    """Compare every replica's batches below the HW with every other replica's."""
    problems: list[str] = []
    for p, hw in sorted(high_watermarks.items()):
        copies = {
            b: committed_batches(log_dirs[b] / f"{topic}-{p}", hw) for b in replicas.get(p, ())
        }
        if not copies:
            continue
        reference_broker, reference = next(iter(copies.items()))
        for broker, batches in copies.items():
            if batches == reference:
                continue
            first = next(
                (i for i, (x, y) in enumerate(zip(batches, reference, strict=False)) if x != y),
                min(len(batches), len(reference)),
            )
            problems.append(
                f"partition {p}: broker {broker} has {len(batches)} batches below hw {hw}, "
                f"broker {reference_broker} {len(reference)}; first difference at batch {first}"
            )
        covered = last_offset(reference[-1]) + 1 if reference else 0
        if covered < hw:
            problems.append(f"partition {p}: replicas' batches end at {covered} below hw {hw}")
    return problems


def unavailability(
    ack_times: Sequence[float], windows: Sequence[tuple[str, float, float]]
) -> list[tuple[str, float]]:
    """For each fault (kind, start, end-of-its-observation): the longest time without any
    successful acknowledgement within [start, end]."""
    times = sorted(ack_times)
    out: list[tuple[str, float]] = []
    for kind, start, end in windows:
        i = bisect.bisect_left(times, start)
        j = bisect.bisect_right(times, end)
        points = [start, *times[i:j], end]
        gap = max((b - a for a, b in itertools.pairwise(points)), default=0.0)
        out.append((kind, gap))
    return out
