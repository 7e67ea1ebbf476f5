"""Checkpoint files in Kafka's text formats, replaced atomically.

Formats (Kafka's ``CheckpointFile``: a version line, a count line, then one entry a line)::

    replication-offset-checkpoint,        0
    recovery-point-offset-checkpoint,     2
    log-start-offset-checkpoint           <topic> <partition> <offset>
                                          <topic> <partition> <offset>

    leader-epoch-checkpoint               0
                                          2
                                          <epoch> <start offset>
                                          <epoch> <start offset>

    partition.metadata                    version: 0
                                          topic_id: <UUID, base64url without padding>

Every write goes to ``<name>.tmp``, is fsynced, renamed over the file, and the directory is
fsynced, so a crash leaves either the old or the new content, never a mix.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from tidelog.model import TopicPartition
from tidelog.replication.epoch import EpochEntry
from tidelog.storage.errors import CorruptCheckpointError

CHECKPOINT_VERSION: Final = 0
REPLICATION_OFFSET_CHECKPOINT: Final = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"
PARTITION_METADATA: Final = "partition.metadata"
TMP_SUFFIX: Final = ".tmp"


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``: temp file, fsync, rename, fsync of the directory."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        data = text.encode()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_files(paths: list[Path]) -> None:
    """fsync each file that still exists (retention may have deleted one meanwhile)."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _read_entries(path: Path, fields: int) -> list[list[str]] | None:
    """The entry lines of a checkpoint file split into ``fields`` words; None if absent."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    lines = text.splitlines()
    if len(lines) < 2:
        raise CorruptCheckpointError(path, f"expected a version and a count line, got {text!r}")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CorruptCheckpointError(path, f"unsupported version {lines[0].strip()!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CorruptCheckpointError(path, f"malformed count line {lines[1]!r}") from None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if count != len(entries):
        raise CorruptCheckpointError(path, f"count line says {count}, found {len(entries)}")
    for number, words in enumerate(entries, start=3):
        if len(words) != fields:
            raise CorruptCheckpointError(path, f"malformed line {number}: {' '.join(words)!r}")
    return entries


class OffsetCheckpointFile:
    """``replication-offset-checkpoint`` and friends: one offset per partition."""

    __slots__ = ("path",)

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[TopicPartition, int]:
        """The offsets in the file (empty if it does not exist)."""
        entries = _read_entries(self.path, 3)
        result: dict[TopicPartition, int] = {}
        for number, (topic, partition, offset) in enumerate(entries or (), start=3):
            try:
                result[TopicPartition(topic, int(partition))] = int(offset)
            except ValueError:
                raise CorruptCheckpointError(
                    self.path, f"malformed line {number}: {topic} {partition} {offset}"
                ) from None
        return result

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
        lines += [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())]
        write_atomically(self.path, "\n".join(lines) + "\n")


class LeaderEpochCheckpointFile:
    """``leader-epoch-checkpoint``: the entries of a partition's leader epoch cache."""

    __slots__ = ("path",)

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[EpochEntry]:
        entries = _read_entries(self.path, 2)
        result: list[EpochEntry] = []
        for number, (epoch, start) in enumerate(entries or (), start=3):
            try:
                result.append(EpochEntry(int(epoch), int(start)))
            except ValueError:
                raise CorruptCheckpointError(
                    self.path, f"malformed line {number}: {epoch} {start}"
                ) from None
        return result

    def write(self, entries: Sequence[EpochEntry]) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(entries))]
        lines += [f"{e.epoch} {e.start_offset}" for e in entries]
        write_atomically(self.path, "\n".join(lines) + "\n")


def encode_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def decode_topic_id(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"topic id {text!r} is not 16 bytes")
    return uuid.UUID(bytes=raw)


class PartitionMetadataFile:
    """``partition.metadata``: the topic id a partition directory belongs to."""

    __slots__ = ("path",)

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> uuid.UUID | None:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        fields: dict[str, str] = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            key, sep, value = line.partition(":")
            if not sep:
                raise CorruptCheckpointError(self.path, f"malformed line {line!r}")
            fields[key.strip()] = value.strip()
        if fields.get("version") != "0":
            raise CorruptCheckpointError(self.path, f"unsupported version {fields.get('version')}")
        try:
            return decode_topic_id(fields["topic_id"])
        except (KeyError, ValueError) as exc:
            raise CorruptCheckpointError(self.path, f"bad topic_id: {exc}") from None

    def write(self, topic_id: uuid.UUID) -> None:
        write_atomically(self.path, f"version: 0\ntopic_id: {encode_topic_id(topic_id)}\n")
