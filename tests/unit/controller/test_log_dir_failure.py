"""The controller's decision for a broker whose log dir went offline (KIP-112) and the
``/log_dir_event_notification`` node it learns it from."""

from __future__ import annotations

import json

import pytest

from tidelog.controller.decisions import Election, on_log_dir_failure
from tidelog.model import BrokerId
from tidelog.replication.partition import LeaderAndIsr
from tidelog.zk import znodes
from tidelog.zk.znodes import LogDirEvent, ZNodeDecodeError

A = (BrokerId(3), BrokerId(1), BrokerId(2))


def b(*ids: int) -> tuple[BrokerId, ...]:
    return tuple(BrokerId(i) for i in ids)


def state(leader: int, isr: tuple[BrokerId, ...], le: int = 3, pe: int = 7) -> LeaderAndIsr:
    return LeaderAndIsr(leader=BrokerId(leader), leader_epoch=le, isr=isr, partition_epoch=pe)


def test_offline_leader_hands_over_to_the_first_clean_successor() -> None:
    res = on_log_dir_failure(A, state(3, b(3, 1, 2)), BrokerId(3), b(1, 2))
    assert res == (state(1, b(1, 2), le=4, pe=8), Election(leader=BrokerId(1), isr=b(1, 2)))
    # The successor must be electable: an ISR member that is shutting down or offline too
    # is skipped (and leaves the ISR with the election).
    res = on_log_dir_failure(A, state(3, b(3, 1, 2)), BrokerId(3), b(2))
    assert res == (state(2, b(2), le=4, pe=8), Election(leader=BrokerId(2), isr=b(2)))


@pytest.mark.parametrize(
    ("isr", "electable"),
    [
        (b(3), b(1, 2)),  # alone in the ISR: the others may lack acknowledged records
        (b(3, 1), b(2)),  # its only ISR peer cannot lead either
    ],
)
def test_offline_leader_without_clean_successor_keeps_the_partition(
    isr: tuple[BrokerId, ...], electable: tuple[BrokerId, ...]
) -> None:
    """Never an unclean election for a live broker whose log is intact: it keeps leading
    (reads work, writes answer KAFKA_STORAGE_ERROR) until room returns or a peer joins."""
    assert on_log_dir_failure(A, state(3, isr), BrokerId(3), electable) is None


def test_offline_follower_leaves_the_isr_without_a_new_leader_epoch() -> None:
    res = on_log_dir_failure(A, state(1, b(1, 2, 3)), BrokerId(3), b(1, 2))
    assert res == (state(1, b(1, 2), le=3, pe=8), None)
    # Already out of the ISR, or the last member of it (offline partition): nothing.
    assert on_log_dir_failure(A, state(1, b(1, 2)), BrokerId(3), b(1, 2)) is None
    assert on_log_dir_failure(A, state(-1, b(3)), BrokerId(3), b(1, 2)) is None


def test_offline_broker_is_never_its_own_successor() -> None:
    """Even if the caller forgets to leave it out of ``electable``."""
    res = on_log_dir_failure(A, state(3, b(3, 1)), BrokerId(3), b(3, 1))
    assert res is not None
    assert res[0].leader == BrokerId(1)


def test_log_dir_event_node_is_kafkas_shape() -> None:
    assert znodes.LOG_DIR_EVENT_PREFIX == "/log_dir_event_notification/log_dir_event_"
    assert znodes.LOG_DIR_EVENT_NOTIFICATION_PATH in znodes.PERSISTENT_PATHS
    kafkas = b'{"version":1,"broker":3,"event":1}'
    assert LogDirEvent.decode(kafkas) == LogDirEvent(BrokerId(3), znodes.LOG_DIR_FAILURE_EVENT)
    assert LogDirEvent(BrokerId(3), 1).encode() == kafkas
    ours = LogDirEvent(BrokerId(3), znodes.LOG_DIR_RECOVERY_EVENT, broker_epoch=4711)
    assert json.loads(ours.encode()) == {
        "version": 1,
        "broker": 3,
        "event": 2,
        "broker_epoch": 4711,
    }
    assert LogDirEvent.decode(ours.encode()) == ours


@pytest.mark.parametrize(
    "data",
    [
        b"nope",
        b'{"version":1,"event":1}',
        b'{"broker":3,"event":"1"}',
        b'{"broker":3,"event":1,"broker_epoch":true}',
    ],
)
def test_log_dir_event_node_that_does_not_decode(data: bytes) -> None:
    with pytest.raises(ZNodeDecodeError, match="log_dir_event_notification"):
        LogDirEvent.decode(data)
