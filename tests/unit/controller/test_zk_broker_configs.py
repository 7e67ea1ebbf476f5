"""``/config/brokers`` znodes and notifications in Kafka's JSON (KIP-226, ZooKeeper mode)."""

from __future__ import annotations

import json

import pytest

from tidelog.zk.broker_configs import (
    DEFAULT_ENTITY,
    broker_config_path,
    decode_broker_config,
    encode_broker_config,
    encode_broker_config_change,
)
from tidelog.zk.znodes import ZNodeDecodeError


def test_layout_and_round_trip() -> None:
    assert broker_config_path("1") == "/config/brokers/1"
    assert broker_config_path(DEFAULT_ENTITY) == "/config/brokers/<default>"
    data = encode_broker_config({"message.max.bytes": "2000", "log.retention.ms": "60000"})
    assert data == (
        b'{"version":1,"config":{"log.retention.ms":"60000","message.max.bytes":"2000"}}'
    )
    assert decode_broker_config("1", data) == {
        "log.retention.ms": "60000",
        "message.max.bytes": "2000",
    }
    assert decode_broker_config("1", b"") == {}
    assert decode_broker_config("1", None) == {}
    assert json.loads(encode_broker_config_change(DEFAULT_ENTITY)) == {
        "version": 2,
        "entity_path": "brokers/<default>",
    }


@pytest.mark.parametrize(
    "data", [b"not json", b"[]", b'{"version":1,"config":{"a":1}}', b'{"config":[]}']
)
def test_bad_znodes(data: bytes) -> None:
    with pytest.raises(ZNodeDecodeError):
        decode_broker_config("1", data)
