"""The JSON files of ``tidelog reassign`` (pure): Kafka's reassignment JSON and its
topics-to-move JSON, read and written as ``kafka-reassign-partitions.sh`` does, and the
lists of ids and partitions its messages print.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tidelog.cli.output import UsageError
from tidelog.model import TopicPartition

ANY_LOG_DIR: Final = "any"

#: partition -> its replicas.
Assignment = Mapping[TopicPartition, Sequence[int]]


@dataclass(frozen=True, slots=True)
class PartitionMove:
    """One entry of a reassignment file."""

    partition: TopicPartition
    replicas: tuple[int, ...]
    log_dirs: tuple[str, ...]


def _load_json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise UsageError("The input string is not a valid JSON") from None


def _version(document: Any) -> None:
    if not isinstance(document, dict):
        raise UsageError('The input JSON must be an object with "version" and its entries')
    version = document.get("version", 1)
    if version != 1 or isinstance(version, bool):
        raise UsageError(f"Not supported version field value {json.dumps(version)}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_reassignment_json(text: str) -> list[PartitionMove]:
    """Kafka's ``parsePartitionReassignmentData`` and ``parseExecuteAssignmentArgs`` checks,
    with their messages; a ``UsageError`` for each."""
    document = _load_json(text)
    _version(document)
    entries = document.get("partitions")
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise UsageError('"partitions" must be a list')
    moves = [_parse_move(index, entry) for index, entry in enumerate(entries)]
    _check_moves(moves)
    return moves


def _parse_move(index: int, entry: Any) -> PartitionMove:
    """One entry of ``"partitions"``, as ``parsePartitionReassignmentData`` reads it; a
    missing ``log_dirs`` is ``"any"`` for every replica."""
    where = f"partitions[{index}]"
    if not isinstance(entry, dict):
        raise UsageError(f"{where} must be an object with topic, partition and replicas")
    topic, partition, replicas = (
        entry.get("topic"),
        entry.get("partition"),
        entry.get("replicas"),
    )
    if not isinstance(topic, str) or not topic:
        raise UsageError(f'{where}: "topic" must be a topic name')
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise UsageError(f'{where}: "partition" must be a partition number')
    if not isinstance(replicas, list) or not all(_is_int(r) for r in replicas):
        raise UsageError(f'{where}: "replicas" must be a list of broker ids')
    tp = TopicPartition(topic, partition)
    log_dirs = entry.get("log_dirs")
    if log_dirs is None:
        log_dirs = [ANY_LOG_DIR] * len(replicas)
    if not isinstance(log_dirs, list) or not all(isinstance(d, str) for d in log_dirs):
        raise UsageError(f'{where}: "log_dirs" must be a list of paths or "any"')
    if len(log_dirs) != len(replicas):
        raise UsageError(
            f"Size of replicas list {ids_text(replicas)} is different from size of log dirs "
            f"list {json.dumps(log_dirs)} for partition {tp}"
        )
    return PartitionMove(tp, tuple(replicas), tuple(log_dirs))


def _check_moves(moves: Sequence[PartitionMove]) -> None:
    """``parseExecuteAssignmentArgs``'s checks over the whole list, in its order: not
    empty, no empty replica list, no partition twice, no replica twice in one list."""
    if not moves:
        raise UsageError("Partition reassignment list cannot be empty")
    if any(not m.replicas for m in moves):
        raise UsageError("Partition replica list cannot be empty")
    seen: set[TopicPartition] = set()
    repeated = []
    for m in moves:
        if m.partition in seen:
            repeated.append(str(m.partition))
        seen.add(m.partition)
    if repeated:
        raise UsageError(
            f"Partition reassignment contains duplicate topic partitions: {','.join(repeated)}"
        )
    duplicates = [
        f"{m.partition} contains multiple entries for "
        f"{','.join(str(r) for r in sorted({r for r in m.replicas if m.replicas.count(r) > 1}))}"
        for m in moves
        if len(set(m.replicas)) != len(m.replicas)
    ]
    if duplicates:
        raise UsageError(
            f"Partition replica lists may not contain duplicate entries: {'. '.join(duplicates)}"
        )


def parse_topics_json(text: str) -> list[str]:
    """Kafka's ``parseTopicsData``: ``{"topics":[{"topic":"t"}],"version":1}``."""
    document = _load_json(text)
    _version(document)
    entries = document.get("topics") or []
    if not isinstance(entries, list):
        raise UsageError('"topics" must be a list')
    topics = []
    for index, entry in enumerate(entries):
        name = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise UsageError(f'topics[{index}] must be an object {{"topic": NAME}}')
        topics.append(name)
    if not topics:
        raise UsageError("List of topics to reassign cannot be empty")
    duplicates = sorted({t for t in topics if topics.count(t) > 1})
    if duplicates:
        raise UsageError(
            f"List of topics to reassign contains duplicate entries: {','.join(duplicates)}"
        )
    return topics


def reassignment_json(
    assignment: Assignment, log_dirs: Mapping[TopicPartition, Sequence[str]] | None = None
) -> str:
    """Kafka's ``formatAsReassignmentJson``: one line, partitions by topic and number."""
    partitions = [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "replicas": list(assignment[tp]),
            "log_dirs": list((log_dirs or {}).get(tp) or [ANY_LOG_DIR] * len(assignment[tp])),
        }
        for tp in sorted(assignment)
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def ids_text(ids: Iterable[int]) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]"


def partitions_text(tps: Iterable[TopicPartition]) -> str:
    return ",".join(str(tp) for tp in sorted(tps))


def plural(n: int) -> str:
    return "" if n == 1 else "s"
