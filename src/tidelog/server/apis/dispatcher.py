"""Frames in, responses out: decode, route to the handler, encode (network rule 3).

The dispatcher is the connection's (``tidelog.server.network.connection``) only view of
the broker: it decodes a request of a version this broker serves, holds it while the
broker is not ready (``tidelog.server.cluster.readiness``), runs the handler the handler
table names (``tidelog.server.apis.handler_table``) and encodes the answer, now or when
the handler's future settles. Before a SASL login completes only the SASL exchange is
served (network rule 6, Kafka's SaslServerAuthenticator).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import typing
from collections.abc import Callable, Mapping
from typing import Any

from tidelog.protocol.apis import ApiKey, advertised_versions
from tidelog.protocol.codec import (
    RequestHeader,
    decode_request,
    encode_api_versions_fallback,
    encode_response,
)
from tidelog.protocol.errors import InvalidRequestError, UnsupportedVersionError
from tidelog.server.apis.handler_table import Routes
from tidelog.server.apis.throttling import RequestThrottler, with_throttle_time
from tidelog.server.coordinators.group import client_host
from tidelog.server.metadata.backend import RequestGate
from tidelog.server.network.connection import CloseConnection, Connection, DispatchResult, Response
from tidelog.server.network.request_context import set_request
from tidelog.server.network.sasl import SaslServerAuthenticator
from tidelog.server.observability.metrics.request_metrics import RequestMetrics, RequestTiming

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


def _settle_when_done(
    source: asyncio.Future[Any],
    out: asyncio.Future[Response | None],
    transform: Callable[[Any], Response | None],
) -> None:
    """When ``source`` is done, ``out`` is too: cancelled, failed, or with its result
    transformed (unless something settled ``out`` first)."""

    def done(f: asyncio.Future[Any]) -> None:
        if out.done():
            return
        if f.cancelled():
            out.cancel()
        elif (exc := f.exception()) is not None:
            out.set_exception(exc)
        else:
            out.set_result(transform(f.result()))

    source.add_done_callback(done)


class Dispatcher:
    """Frames in, responses out: decode, route to the handler, encode (network rule 3)."""

    def __init__(
        self,
        apis: Routes,
        supported: Mapping[ApiKey, tuple[int, int]],
        gate: RequestGate | None = None,
        request_metrics: RequestMetrics | None = None,
        throttler: RequestThrottler | None = None,
    ) -> None:
        self._apis = apis
        self._supported = supported
        self._handlers = apis.handlers
        #: In a cluster: client requests wait until the broker has the cluster's metadata.
        self._gate = gate
        #: Per-API counts and times when ``metrics.listener`` is set
        #: (tidelog.server.observability.metrics).
        self._request_metrics = request_metrics
        #: Client quotas (``tidelog.server.apis.throttling``).
        self._throttler = throttler

    def dispatch(self, conn: Connection, frame: bytes) -> DispatchResult:
        authenticator = conn.authenticator
        if authenticator is not None:
            # Network rule 6: nothing but the SASL exchange until it completes.
            return self._authenticate(
                conn, typing.cast("SaslServerAuthenticator", authenticator), frame
            )
        decoded = self._decode(frame)
        if isinstance(decoded, Response):
            return decoded
        header, body = decoded
        metrics = self._request_metrics
        # Time marks (tidelog.server.observability.metrics rule 5): received, handler start,
        # local done; the answer's readiness and write are marked later.
        timing = (
            metrics.start(header.api_key, body, conn.last_active) if metrics is not None else None
        )
        gate = self._gate
        if gate is not None and gate.must_hold(conn, header.api_key, body):
            result: DispatchResult = self._hold(gate, conn, header, body, timing, size=len(frame))
        elif timing is None:
            result = self._run(conn, header, body, len(frame))
        else:
            timing.started = time.monotonic()
            result = self._run(conn, header, body, len(frame))
            timing.local_done = time.monotonic()
        if timing is not None:
            RequestMetrics.dispatched(timing, result, conn.timings)
        return result

    def _decode(self, frame: bytes, when: str = "") -> tuple[RequestHeader, Any] | Response:
        """``decode_request`` with Kafka's answers to what it refuses: an ApiVersions of a
        version we lack gets the KIP-511 v0 answer (UNSUPPORTED_VERSION and our ranges; the
        client retries with a version it shares with us); anything else closes the
        connection (``when`` says at which stage)."""
        try:
            return decode_request(frame, self._supported)
        except UnsupportedVersionError as exc:
            if exc.header.api_key == ApiKey.API_VERSIONS:
                advertised = advertised_versions(self._supported)
                return Response([encode_api_versions_fallback(exc.header, advertised)])
            raise CloseConnection(
                f"{exc} (client {exc.header.client_id!r}, correlation id "
                f"{exc.header.correlation_id}){when}"
            ) from None
        except InvalidRequestError as exc:
            raise CloseConnection(f"{exc}{when}") from None

    def _authenticate(
        self, conn: Connection, auth: SaslServerAuthenticator, frame: bytes
    ) -> DispatchResult:
        """Kafka's SaslServerAuthenticator flow: ApiVersions and SaslHandshake, then either
        SaslAuthenticate requests (handshake v1) or raw tokens (handshake v0); any other
        request, or a failed login, closes the connection (a failed SaslAuthenticate is
        answered first, with SASL_AUTHENTICATION_FAILED and the reason)."""
        if auth.expects_raw_token:
            token = auth.raw_token(frame)  # raises CloseConnection on failure
            self._maybe_authenticated(conn, auth)
            return Response([_SIZE.pack(len(token)), token])
        decoded = self._decode(frame, " before SASL authentication")
        if isinstance(decoded, Response):
            return decoded
        header, body = decoded
        conn.client_id = header.client_id
        if header.api_key == ApiKey.API_VERSIONS:
            return self._run(conn, header, body)
        if header.api_key == ApiKey.SASL_HANDSHAKE:
            response = self._encode(header, auth.handle_handshake(header.api_version, body))
            if auth.failed:  # an unsupported mechanism: answered, then closed (Kafka)
                raise CloseConnection(
                    f"SaslHandshake for a mechanism listener {conn.listener_name} does not enable",
                    final=response,
                )
        elif header.api_key == ApiKey.SASL_AUTHENTICATE:
            response = self._encode(header, auth.handle_authenticate(header.api_version, body))
            if auth.failed:
                raise CloseConnection(
                    f"SASL authentication failed on listener {conn.listener_name}",
                    final=response,
                )
            self._maybe_authenticated(conn, auth)
        else:
            raise CloseConnection(
                f"{header.api_name} request before SASL authentication on listener "
                f"{conn.listener_name} (client {header.client_id!r})"
            )
        return response

    @staticmethod
    def _maybe_authenticated(conn: Connection, auth: SaslServerAuthenticator) -> None:
        if auth.complete and auth.principal is not None:
            conn.authenticated(auth.principal)
            log.info(
                "%s authenticated as %s on listener %s",
                conn.peer,
                auth.principal,
                conn.listener_name,
            )

    def _hold(
        self,
        gate: RequestGate,
        conn: Connection,
        header: RequestHeader,
        body: Any,
        timing: RequestTiming | None = None,
        *,
        size: int = 0,
    ) -> asyncio.Future[Response | None]:
        """The broker is not ready (``tidelog.server.cluster.readiness``): the request runs when it
        is, or its connection closes."""
        out: asyncio.Future[Response | None] = asyncio.get_running_loop().create_future()

        def run() -> None:
            if timing is not None:
                timing.started = time.monotonic()
            try:
                result = self._run(conn, header, body, size)
            except Exception as exc:  # the connection closes with it
                out.set_exception(exc)
                return
            if timing is not None:
                timing.local_done = time.monotonic()
            if isinstance(result, asyncio.Future):
                _settle_when_done(result, out, lambda response: response)
            else:
                out.set_result(result)

        gate.hold(conn, header.api_key, body, run=run, fail=out.set_exception, done=out.done)
        return out

    def _run(
        self, conn: Connection, header: RequestHeader, body: Any, size: int = 0
    ) -> DispatchResult:
        client_host.set(conn.peer)  # for the group coordinator's member descriptions
        set_request(conn.request_context)
        handler = self._handlers.get(header.api_key)
        if handler is None:  # pragma: no cover - decode_request refuses unserved APIs
            raise CloseConnection(f"API {header.api_name} is not served")
        throttler = self._throttler
        state = None if throttler is None else throttler.before(conn, header, body, size)
        if state is None:
            result = handler(header, body)
            if isinstance(result, asyncio.Future):
                out: asyncio.Future[Response | None] = asyncio.get_running_loop().create_future()
                _settle_when_done(result, out, lambda body: self._encode(header, body))
                return out
            return self._encode(header, result)
        # Client quotas: the answer carries the throttle time, the connection is muted.
        assert throttler is not None
        try:
            result = handler(header, body)
        finally:
            throttler.after_handler(state)

        def finish(answer: Any) -> Response | None:
            encoded = self._encode(header, with_throttle_time(answer, state.throttle_ms))
            return throttler.answer(state, conn, header, encoded)

        if isinstance(result, asyncio.Future):
            out = asyncio.get_running_loop().create_future()
            _settle_when_done(result, out, finish)
            return out
        return finish(result)

    @staticmethod
    def _encode(header: RequestHeader, body: Any) -> Response | None:
        if body is None or isinstance(body, Response):
            return body
        return Response([encode_response(header, body)])


__all__ = ["Dispatcher"]
