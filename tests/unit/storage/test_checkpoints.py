"""Checkpoint files: Kafka's exact text formats, atomic replacement, clear errors."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tidelog.model import TopicPartition
from tidelog.replication.epoch import EpochEntry
from tidelog.storage.checkpoints import (
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadataFile,
    decode_topic_id,
    encode_topic_id,
)
from tidelog.storage.errors import CorruptCheckpointError


def test_offset_checkpoint_round_trip_and_format(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    checkpoint = OffsetCheckpointFile(path)
    assert checkpoint.read() == {}
    offsets = {TopicPartition("orders", 1): 42, TopicPartition("a.b_c-d", 0): 7}
    checkpoint.write(offsets)
    assert path.read_text() == "0\n2\na.b_c-d 0 7\norders 1 42\n"
    assert checkpoint.read() == offsets
    assert not (tmp_path / "replication-offset-checkpoint.tmp").exists()
    checkpoint.write({})
    assert path.read_text() == "0\n0\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected a version and a count line"),
        ("1\n0\n", "unsupported version '1'"),
        ("0\nx\n", "malformed count line 'x'"),
        ("0\n2\nt 0 1\n", "count line says 2, found 1"),
        ("0\n1\nt 0\n", "malformed line 3: 't 0'"),
        ("0\n1\nt zero 1\n", "malformed line 3: t zero 1"),
    ],
)
def test_malformed_offset_checkpoint_names_file_and_problem(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError) as info:
        OffsetCheckpointFile(path).read()
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_leader_epoch_checkpoint_format(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    checkpoint = LeaderEpochCheckpointFile(path)
    checkpoint.write([EpochEntry(0, 0), EpochEntry(3, 120)])
    assert path.read_text() == "0\n2\n0 0\n3 120\n"
    assert checkpoint.read() == [EpochEntry(0, 0), EpochEntry(3, 120)]


def test_partition_metadata_uses_kafkas_base64url_topic_id(tmp_path: Path) -> None:
    topic_id = uuid.UUID("0b8ab5a8-0c1d-4ab1-9a8c-2f4e3a6b7c8d")
    path = tmp_path / "partition.metadata"
    PartitionMetadataFile(path).write(topic_id)
    # Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding (22 characters).
    assert path.read_text() == "version: 0\ntopic_id: C4q1qAwdSrGajC9OOmt8jQ\n"
    assert PartitionMetadataFile(path).read() == topic_id
    assert decode_topic_id(encode_topic_id(topic_id)) == topic_id
    # Kafka's Uuid.ONE_UUID (0, 1) prints as AAAAAAAAAAAAAAAAAAAAAQ.
    assert encode_topic_id(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert PartitionMetadataFile(tmp_path / "missing").read() is None


def test_partition_metadata_errors(tmp_path: Path) -> None:
    path = tmp_path / "partition.metadata"
    path.write_text("version: 1\ntopic_id: C4q1qAwdSrGajC9OOmt8jQ\n")
    with pytest.raises(CorruptCheckpointError, match="unsupported version 1"):
        PartitionMetadataFile(path).read()
    path.write_text("version: 0\ntopic_id: tooshort\n")
    with pytest.raises(CorruptCheckpointError, match="bad topic_id"):
        PartitionMetadataFile(path).read()
