"""The replica manager's log dir failure (rule 5): a write error takes the dir offline,
produces answer KAFKA_STORAGE_ERROR without touching the disk, reads go on, and a dir that
ran out of space comes back once the probe finds room (after any other error it stays
offline until restart)."""

from __future__ import annotations

import errno
import uuid
from pathlib import Path

import pytest

from tidelog.client.records import Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.server.config.broker_config import load_broker_config
from tidelog.server.config.topic_config import effective_topic_config
from tidelog.server.replica.manager import (
    LOG_DIR_PROBE_FILE,
    ReplicaManager,
    log_config_for,
    now_ms,
    probe_log_dir,
)
from tidelog.server.replica.reads import PartitionRead
from tidelog.storage.log_manager import LogManager

TP = TopicPartition("t", 0)


def manager(tmp_path: Path) -> ReplicaManager:
    config = load_broker_config({"log.dirs": str(tmp_path)})
    logs = LogManager(
        [tmp_path], log_config_for(effective_topic_config(config, {})), now_ms=now_ms()
    )
    return ReplicaManager(config, logs)


def batch(value: bytes) -> bytes:
    return build_batch([Record(value=value)], base_timestamp_ms=1)


def test_write_error_takes_the_dir_offline_until_it_has_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rm = manager(tmp_path)
    failed: list[Path] = []
    recovered: list[Path] = []
    rm.log_dir_failure_sink = failed.append
    rm.log_dir_recovery_sink = recovered.append
    hosted = rm.make_leader(TP, uuid.uuid4(), effective_topic_config(rm.config, {}))
    assert rm.append_records({TP: batch(b"a")}, acks=1)[TP][0].error == ErrorCode.NONE

    def full(*_args: object, **_kwargs: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as disk:
        disk.setattr("tidelog.storage.segment.os.pwritev", full)
        answer = rm.append_records({TP: batch(b"b")}, acks=1)[TP][0]
    assert answer.error == ErrorCode.KAFKA_STORAGE_ERROR
    assert failed == [tmp_path]
    assert rm.is_offline(TP)
    assert rm.recoverable_offline_log_dirs() == [tmp_path]
    # Offline: refused before the disk is touched (even with room), nothing appended.
    answer = rm.append_records({TP: batch(b"c")}, acks=1)[TP][0]
    assert answer.error == ErrorCode.KAFKA_STORAGE_ERROR
    assert answer.message == f"log dir {tmp_path} is offline"
    assert hosted.log.log_end_offset == 1
    # Reads go on: the data is intact.
    [read] = rm.read([PartitionRead(TP, 0, 1 << 20)], 1 << 20)
    assert read.error == ErrorCode.NONE
    assert read.records is not None
    assert read.records.length > 0

    # The probe finds room (a real write + fsync in the dir): back, once.
    assert probe_log_dir(tmp_path, free_bytes=1)
    assert not (tmp_path / LOG_DIR_PROBE_FILE).exists()
    rm.mark_log_dir_online(tmp_path)
    rm.mark_log_dir_online(tmp_path)
    assert recovered == [tmp_path]
    assert not rm.is_offline(TP)
    appended = rm.append_records({TP: batch(b"d")}, acks=1)[TP][0]
    assert (appended.error, appended.base_offset) == (ErrorCode.NONE, 1)


def test_probe_wants_the_margin_free(tmp_path: Path) -> None:
    assert not probe_log_dir(tmp_path, free_bytes=1 << 62)
    assert not probe_log_dir(tmp_path / "missing", free_bytes=1)


def test_io_error_keeps_the_dir_offline_until_restart(tmp_path: Path) -> None:
    rm = manager(tmp_path)
    rm.make_leader(TP, uuid.uuid4(), effective_topic_config(rm.config, {}))
    rm.on_storage_error(TP, OSError(errno.EIO, "Input/output error"))
    assert rm.is_offline(TP)
    assert rm.recoverable_offline_log_dirs() == []  # never probed: Kafka's behaviour
    assert rm.append_records({TP: batch(b"a")}, acks=1)[TP][0].error == (
        ErrorCode.KAFKA_STORAGE_ERROR
    )
