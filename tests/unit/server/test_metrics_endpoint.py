"""The metrics HTTP endpoint (tidelog.server.observability.metrics.endpoint)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from tests.unit.server.metrics_fakes import exchange, fake_replica_manager, split
from tidelog.server.config.values import MetricsListener
from tidelog.server.observability.metrics.broker_collector import broker_registry
from tidelog.server.observability.metrics.endpoint import CONTENT_TYPE, MetricsEndpoint


def with_endpoint(test: Callable[[int], Awaitable[None]]) -> None:
    async def body() -> None:
        registry = broker_registry(fake_replica_manager(), process=False)  # type: ignore[arg-type]
        endpoint = MetricsEndpoint(registry)
        port = await endpoint.start(MetricsListener("127.0.0.1", 0))
        assert port > 0
        try:
            await test(port)
        finally:
            await endpoint.stop()

    asyncio.run(body())


def test_get_metrics_answers_200_in_the_text_format() -> None:
    async def test(port: int) -> None:
        answer = await exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, body = split(answer)
        assert status == "HTTP/1.1 200 OK"
        assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert headers["content-type"] == CONTENT_TYPE
        assert headers["connection"] == "close"
        assert int(headers["content-length"]) == len(body)
        assert b"\nkafka_server_replicamanager_leadercount 3.0\n" in body
        # A query string (Prometheus sends none, but a browser might) is fine; HEAD too.
        status, _, _ = split(await exchange(port, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n"))
        assert status == "HTTP/1.1 200 OK"
        status, headers, body = split(await exchange(port, b"HEAD /metrics HTTP/1.1\r\n\r\n"))
        assert status == "HTTP/1.1 200 OK"
        assert body == b""
        assert int(headers["content-length"]) > 0

    with_endpoint(test)


def test_other_paths_are_404_and_other_methods_405() -> None:
    async def test(port: int) -> None:
        status, _, body = split(await exchange(port, b"GET / HTTP/1.1\r\n\r\n"))
        assert status == "HTTP/1.1 404 Not Found"
        assert b"/metrics" in body
        status, _, _ = split(await exchange(port, b"GET /metricsx HTTP/1.1\r\n\r\n"))
        assert status == "HTTP/1.1 404 Not Found"
        status, headers, _ = split(await exchange(port, b"POST /metrics HTTP/1.1\r\n\r\n"))
        assert status == "HTTP/1.1 405 Method Not Allowed"
        assert headers["allow"] == "GET, HEAD"

    with_endpoint(test)


def test_bad_input_is_answered_400_and_the_connection_closed() -> None:
    async def test(port: int) -> None:
        # Garbage for a request line (here a TLS ClientHello's start): 400, then EOF,
        # without waiting for any header.
        answer = await exchange(port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n")
        status, headers, _ = split(answer)
        assert status == "HTTP/1.1 400 Bad Request"
        assert headers["connection"] == "close"
        # Not HTTP/1.x, or too many words.
        for line in (b"GET /metrics\r\n", b"GET /metrics SPDY/3\r\n", b"GET / x HTTP/1.1\r\n"):
            status, _, _ = split(await exchange(port, line))
            assert status == "HTTP/1.1 400 Bad Request", line
        # A line longer than the limit, and more behind it: still answered, not reset.
        long_line = b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n"
        status, _, _ = split(await exchange(port, long_line))
        assert status == "HTTP/1.1 400 Bad Request"
        # A line cut short by the client's end is bad input too.
        status, _, _ = split(await exchange(port, b"GET /met", eof=True))
        assert status == "HTTP/1.1 400 Bad Request"
        # A client that sends nothing and closes its side gets nothing.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 5.0) == b""
        writer.close()

    with_endpoint(test)


def test_a_client_that_goes_away_mid_request_leaves_the_endpoint_serving() -> None:
    async def test(port: int) -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # no blank line
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        status, _, _ = split(await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n"))
        assert status == "HTTP/1.1 200 OK"

    with_endpoint(test)
