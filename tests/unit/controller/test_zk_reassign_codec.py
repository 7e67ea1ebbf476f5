"""``/admin/reassign_partitions`` JSON (Kafka's ``ReassignPartitionsZNode``)."""

from __future__ import annotations

import pytest

from tidelog.model import BrokerId, TopicPartition
from tidelog.zk.reassign import decode_reassignment, encode_reassignment
from tidelog.zk.znodes import ZNodeDecodeError


def test_round_trip_in_kafkas_format() -> None:
    data = encode_reassignment({TopicPartition("t", 1): (BrokerId(2), BrokerId(0))})
    assert data == b'{"version":1,"partitions":[{"topic":"t","partition":1,"replicas":[2,0]}]}'
    assert decode_reassignment(data) == {TopicPartition("t", 1): (2, 0)}


def test_log_dirs_are_accepted_and_ignored() -> None:
    data = (
        b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1],'
        b'"log_dirs":["any"]}]}'
    )
    assert decode_reassignment(data) == {TopicPartition("t", 0): (1,)}


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b'{"version":1}',
        b'{"version":1,"partitions":[{"topic":"t","partition":"0","replicas":[1]}]}',
        b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[true]}]}',
        b'{"version":1,"partitions":[7]}',
    ],
)
def test_anything_else_is_a_decode_error_naming_the_znode(data: bytes) -> None:
    with pytest.raises(ZNodeDecodeError, match="/admin/reassign_partitions"):
        decode_reassignment(data)
