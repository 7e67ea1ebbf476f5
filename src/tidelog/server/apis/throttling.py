"""Client quotas on the request path: what a request counts, what it is answered with, and
the muting (KIP-13, KIP-124, KIP-219), for the dispatcher.

Rules:

1. Quotas apply to clients' requests only: not to the control plane and inter-broker APIs
   (Kafka's cluster actions), not to the SASL exchange, not to followers' Fetch
   (``replica_id >= 0``, which replication throttles cover). With no quota set anywhere
   the dispatcher skips all of it (``ClientQuotas.enabled``).
2. The user is the principal's name, sanitized (``User:ANONYMOUS`` without a login), the
   client-id the request header's.
3. Before the handler: the request quota's throttle as measured so far, and for a Produce
   the request's bytes are recorded against ``producer_byte_rate`` (Kafka counts the
   request's size). The larger throttle is the answer's ``throttle_time_ms``
   (``request_context.current_throttle_ms`` for handlers that encode their answer). After
   the handler: its event-loop time is recorded against ``request_percentage`` (it counts
   from the next request on; Kafka records before answering, we answer from what was
   measured before).
4. A consumer's Fetch answer's bytes (records regions included) are recorded against
   ``consumer_byte_rate`` once it is built; its throttle is written into the answer
   (``protocol.responses.with_fetch_throttle``).
5. The connection is muted for the answer's throttle time (``Connection.throttle``), from
   when the answer is sent. A request already throttled at rule 3 also mutes it at once:
   Kafka reads one request of a connection at a time, so a client waits for an answer
   before its next request is read; tidelog reads pipelined requests, and without the early
   mute a producer with many requests in flight would have all of them counted before the
   first answer muted it, running above its quota in bursts.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
import typing
from dataclasses import dataclass
from typing import Any, Final

from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.protocol.responses import with_fetch_throttle
from tidelog.server.network.connection import Connection, Response
from tidelog.server.network.region_reads import RecordsRegion
from tidelog.server.network.request_context import reset_throttle_ms, set_throttle_ms
from tidelog.server.quotas.manager import ClientQuotas
from tidelog.zk.users import sanitize

#: Rule 1: never throttled.
EXEMPT_APIS: Final = frozenset(
    {
        ApiKey.LEADER_AND_ISR,
        ApiKey.STOP_REPLICA,
        ApiKey.UPDATE_METADATA,
        ApiKey.CONTROLLED_SHUTDOWN,
        ApiKey.ALTER_PARTITION,
        ApiKey.WRITE_TXN_MARKERS,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
    }
)


def replica_id(body: Any) -> int:
    """A Fetch's replica id: top-level before v15, inside replica_state from v15 (KIP-903)."""
    replica_state = getattr(body, "replica_state", None)
    if replica_state is not None:
        return int(replica_state.replica_id)
    return int(getattr(body, "replica_id", -1))


def response_size(response: Response) -> int:
    """The answer's bytes on the wire, records regions included."""
    total = 0
    for part in response.parts:
        if isinstance(part, (bytes, bytearray, memoryview)):
            total += len(part)
        else:
            total += typing.cast(RecordsRegion, part).length
    return total


def with_throttle_time(body: Any, throttle_ms: int) -> Any:
    """A kio response body answering with ``throttle_ms`` (bodies without the field as
    they are)."""
    if throttle_ms <= 0 or not hasattr(body, "throttle_time"):
        return body
    return dataclasses.replace(body, throttle_time=datetime.timedelta(milliseconds=throttle_ms))


@dataclass(slots=True)
class Throttle:
    """One request's quota state, from ``before`` to ``answer``."""

    user: str
    client_id: str
    throttle_ms: int
    started: float
    token: Any
    consumer_fetch: bool


class RequestThrottler:
    """Rules 1-5 over the broker's ``ClientQuotas``."""

    def __init__(self, quotas: ClientQuotas) -> None:
        self.quotas = quotas

    def before(
        self, conn: Connection, header: RequestHeader, body: Any, size: int
    ) -> Throttle | None:
        """Rules 1-3 before the handler; None when no quota applies."""
        quotas = self.quotas
        api = header.api_key
        if not quotas.enabled or api in EXEMPT_APIS:
            return None
        consumer_fetch = False
        if api == ApiKey.FETCH:
            if replica_id(body) >= 0:
                return None
            consumer_fetch = True
        user = sanitize(conn.principal.name)
        client_id = header.client_id or ""
        throttle = quotas.request.throttle_ms(user, client_id)
        if api == ApiKey.PRODUCE:
            throttle = max(throttle, quotas.produce.record(user, client_id, size))
        # Rule 5: stop reading now; ``answer`` mutes again from when the answer goes out.
        conn.throttle(throttle)
        token = set_throttle_ms(throttle)
        return Throttle(user, client_id, throttle, time.perf_counter(), token, consumer_fetch)

    def after_handler(self, state: Throttle) -> None:
        """Rule 3: the handler returned."""
        reset_throttle_ms(state.token)
        busy_s = time.perf_counter() - state.started
        self.quotas.request.record(state.user, state.client_id, busy_s * 100.0)

    def answer(
        self, state: Throttle, conn: Connection, header: RequestHeader, response: Response | None
    ) -> Response | None:
        """Rules 4, 5: the answer as sent, and the muting."""
        throttle = state.throttle_ms
        if state.consumer_fetch and response is not None and response.parts:
            fetched = self.quotas.fetch.record(state.user, state.client_id, response_size(response))
            throttle = max(throttle, fetched)
            first = response.parts[0]
            if throttle > 0 and isinstance(first, (bytes, bytearray, memoryview)):
                patched = with_fetch_throttle(bytes(first), header.api_version, throttle)
                response = Response([patched, *response.parts[1:]])
        conn.throttle(throttle)
        return response


__all__ = [
    "EXEMPT_APIS",
    "RequestThrottler",
    "Throttle",
    "replica_id",
    "response_size",
    "with_throttle_time",
]
