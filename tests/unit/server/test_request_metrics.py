"""Request counts and time splits (tidelog.server.observability.metrics.request_metrics)."""

from __future__ import annotations

import asyncio
import struct
import time
from types import SimpleNamespace
from typing import Any

import pytest

from tests.unit.server.metrics_fakes import fake_replica_manager, scrape
from tidelog.protocol.apis import ApiKey
from tidelog.security.principal import ANONYMOUS
from tidelog.server.apis.dispatcher import Dispatcher
from tidelog.server.network.request_context import RequestContext
from tidelog.server.observability.metrics.broker_collector import broker_registry
from tidelog.server.observability.metrics.request_metrics import (
    RequestMetrics,
    RequestTiming,
    request_name,
)


def test_request_names_are_kafkas() -> None:
    assert request_name(ApiKey.PRODUCE) == "Produce"
    assert request_name(ApiKey.LIST_OFFSETS) == "ListOffsets"
    assert request_name(ApiKey.LEADER_AND_ISR) == "LeaderAndIsr"
    assert request_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert request_name(ApiKey.API_VERSIONS) == "ApiVersions"
    assert request_name(9999) == "9999"


def test_requests_are_counted_when_answered_and_fetches_split_by_side() -> None:
    async def body() -> tuple[dict[str, float], dict[str, float]]:
        requests = RequestMetrics([ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA])
        registry = broker_registry(
            fake_replica_manager(),  # type: ignore[arg-type]
            requests=requests,
            process=False,
        )
        timings: dict[int, Any] = {}

        def answer(api_key: ApiKey, body: object, result: object) -> RequestTiming | None:
            timing = requests.start(api_key, body, time.monotonic())
            if timing is not None:
                RequestMetrics.dispatched(timing, result, timings)
            return timing

        answers = [object(), object()]
        for result in answers:
            answer(ApiKey.PRODUCE, None, result)
        parked: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        answer(ApiKey.PRODUCE, None, parked)  # acks=all: not yet
        answer(ApiKey.PRODUCE, None, None)  # acks=0: no answer, done at once
        consumer, follower = object(), object()
        answer(ApiKey.FETCH, SimpleNamespace(replica_id=-1), consumer)
        answer(ApiKey.FETCH, SimpleNamespace(replica_state=SimpleNamespace(replica_id=2)), follower)
        assert answer(ApiKey.CREATE_TOPICS, None, object()) is None  # not served: ignored
        before = scrape(registry)
        # The connection writes the answers: each is counted then.
        for result in (*answers, consumer, follower):
            timings.pop(id(result)).sent(time.monotonic())
        parked.set_result(None)
        await asyncio.sleep(0)
        timings.pop(id(parked)).sent(time.monotonic())
        assert timings == {}
        return before, scrape(registry)

    before, after = asyncio.run(body())
    total = 'kafka_network_requestmetrics_requests_total{{request="{}"}}'
    assert before[total.format("Produce")] == 1  # only the acks=0 one
    assert before[total.format("Fetch")] == 0
    assert after[total.format("Produce")] == 4
    assert after[total.format("Fetch")] == 2
    assert after[total.format("FetchConsumer")] == 1
    assert after[total.format("FetchFollower")] == 1
    assert after[total.format("Metadata")] == 0
    assert not [k for k in after if "CreateTopics" in k]
    for split in (
        "totaltimems",
        "requestqueuetimems",
        "localtimems",
        "remotetimems",
        "responsequeuetimems",
        "responsesendtimems",
    ):
        name = f"kafka_network_requestmetrics_{split}"
        assert after[f'{name}_count{{request="Produce"}}'] == 4, split
        assert after[f'{name}_bucket{{le="+Inf",request="Produce"}}'] == 4, split
        assert after[f'{name}_sum{{request="Produce"}}'] >= 0, split
        # Histograms only for requests seen.
        assert f'{name}_count{{request="Metadata"}}' not in after, split


def test_the_time_split_adds_up_to_the_total() -> None:
    """Marks 0, 2, 5, 105, 106, 109 ms: queue 2, local 3, remote 100 (parked), response
    queue 1, send 3, total 109."""
    requests = RequestMetrics([ApiKey.PRODUCE])
    stats = requests.stats("Produce")
    assert stats is not None
    stats.record(10.0, 10.002, 10.005, 10.105, 10.106, 10.109)
    expected = {
        "totaltimems": 109.0,
        "requestqueuetimems": 2.0,
        "localtimems": 3.0,
        "remotetimems": 100.0,
        "responsequeuetimems": 1.0,
        "responsesendtimems": 3.0,
    }
    for split, ms in expected.items():
        histogram = stats.histogram(split)
        assert histogram.count == 1, split
        assert histogram.sum_ms == pytest.approx(ms, abs=1e-6), split
    got = scrape(broker_registry(fake_replica_manager(), requests=requests, process=False))  # type: ignore[arg-type]
    remote = "kafka_network_requestmetrics_remotetimems_bucket"
    assert got[f'{remote}{{le="50.0",request="Produce"}}'] == 0
    assert got[f'{remote}{{le="250.0",request="Produce"}}'] == 1
    local = "kafka_network_requestmetrics_localtimems_bucket"
    assert got[f'{local}{{le="2.5",request="Produce"}}'] == 0
    assert got[f'{local}{{le="5.0",request="Produce"}}'] == 1


def test_the_dispatcher_marks_what_it_dispatches() -> None:
    requests = RequestMetrics([ApiKey.API_VERSIONS])
    handled: list[int] = []

    def handler(header: Any, _body: Any) -> None:
        handled.append(header.correlation_id)
        time.sleep(0.02)  # local time
        # acks=0 style: no answer

    apis = SimpleNamespace(handlers={ApiKey.API_VERSIONS: handler})
    dispatcher = Dispatcher(
        apis,  # type: ignore[arg-type]
        {ApiKey.API_VERSIONS: (0, 3)},
        request_metrics=requests,
    )
    client_id = b"test"
    frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 7, len(client_id)) + client_id
    conn = SimpleNamespace(
        peer="127.0.0.1:1",
        authenticator=None,
        request_context=RequestContext(ANONYMOUS, "127.0.0.1", "PLAINTEXT", "PLAINTEXT"),
        last_active=time.monotonic() - 0.05,  # received 50 ms ago
        timings={},
    )
    assert dispatcher.dispatch(conn, frame) is None  # type: ignore[arg-type]
    assert handled == [7]
    stats = requests.stats("ApiVersions")
    assert stats is not None
    assert stats.count == 1
    assert stats.histogram("requestqueuetimems").sum_ms >= 50.0
    assert 20.0 <= stats.histogram("localtimems").sum_ms < 1000.0
    assert stats.histogram("remotetimems").sum_ms == 0.0
    assert stats.histogram("totaltimems").sum_ms >= 70.0
    assert conn.timings == {}  # nothing left to write
