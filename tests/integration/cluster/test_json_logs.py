"""``log.format=json`` on real brokers (``tidelog.server.observability.log_format``): every
line a broker writes, from start-up through a produce to a clean shutdown, is one JSON object
with the broker's id, and the replication lines carry topic, partition and leader epoch."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.harness import BrokerCluster
from tests.integration.cluster.helpers import create_topic, produce

pytestmark = pytest.mark.integration

_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of a broker's output as a JSON object (a line that is not one fails)."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            pytest.fail(f"line {number} is not JSON ({exc}): {line!r}")
        assert isinstance(obj, dict), line
        out.append(obj)
    return out


def test_every_line_is_json_with_partition_fields(
    new_cluster: Callable[..., BrokerCluster],
) -> None:
    cluster = new_cluster(3, {"log.format": "json"})
    create_topic(cluster, "jsonlog", partitions=3, rf=3)
    offsets = produce(cluster.bootstrap, "jsonlog", [f"v{i}".encode() for i in range(200)])
    assert len(offsets) == 200
    # A clean stop: the controlled shutdown moves leaders (more LeaderAndIsr lines on the
    # others) and the stopped broker logs its shutdown.
    stopped = cluster.brokers[0]
    assert stopped.stop() == 0
    for broker in cluster.brokers:
        lines = json_lines(broker.output())
        assert len(lines) > 5
        for line in lines:
            assert list(line)[:5] == ["time", "level", "logger", "message", "broker_id"], line
            assert _TIME.fullmatch(line["time"]), line
            assert line["level"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
            assert line["broker_id"] == broker.broker_id
        replication = [
            line
            for line in lines
            if line.get("topic") == "jsonlog" and re.search(r": (leader|follower)", line["message"])
        ]
        assert {line["partition"] for line in replication} == {0, 1, 2}, lines
        for line in replication:
            assert line["message"].startswith(f"jsonlog-{line['partition']}: ")
            assert f"epoch {line['leader_epoch']}" in line["message"]
    assert any("shut down cleanly" in line["message"] for line in json_lines(stopped.output()))
