"""The broker's handler table, alone and in a cluster: every API it advertises has exactly
one handler (the groups merged without a duplicate), and nothing is handled that is not
advertised."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tidelog.protocol.apis import ApiKey
from tidelog.server.broker import Broker
from tidelog.server.config.broker_config import load_broker_config


@pytest.mark.parametrize("zookeeper", ["", "127.0.0.1:1"])
def test_every_served_api_has_one_handler(tmp_path: Path, zookeeper: str) -> None:
    config = load_broker_config({"log.dirs": str(tmp_path), "zookeeper.connect": zookeeper})

    async def wire() -> Broker:
        broker = Broker(config)
        broker._open()
        return broker

    broker = asyncio.run(wire())
    try:
        assert set(broker.handler_table.handlers) == set(broker.supported)
        clustered = ApiKey.LEADER_AND_ISR in broker.handler_table.handlers
        assert clustered == bool(zookeeper)
    finally:
        broker.log_manager.close()
