"""The connector's connection and retry policy: a lazily opened ``BlockingClient`` per
process (``Session``) and the one backoff schedule (``Backoff``) every retry loop of the
connector sleeps on, in threads and in coroutines alike.

Every object holds a ``BlockingClient`` opened on first use and is never pickled: Spark
ships plain option values and offset ranges, and each executor task opens its own
connection. Security (TLS, SASL) travels the same way, as the options'
``security_properties`` strings; every client is built with the ``ClientSecurity`` they
give (``options.client_security``).

Failures: retriable broker errors (``REFRESH_ERRORS``: NOT_LEADER_OR_FOLLOWER,
LEADER_NOT_AVAILABLE, fenced or unknown epochs, ...) and lost connections refresh the
metadata, back off (100 ms doubling to 2 s) and retry until a deadline; anything else, or
the deadline, raises ``ConnectorError`` naming what was being done.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from tidelog.client import BlockingClient, ClientConnectionError, ClientTimeoutError
from tidelog.errors import ErrorCode
from tidelog.spark.errors import ConnectorError
from tidelog.spark.option_values import SecurityProperties, client_security

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_START_S: Final = 0.1
BACKOFF_MAX_S: Final = 2.0
#: Errors after which a metadata refresh and a retry may succeed.
REFRESH_ERRORS: Final = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.OFFSET_NOT_AVAILABLE,
    }
)


class RetryableError(Exception):
    """A failure worth retrying after a metadata refresh (raised inside ``Session.call``)."""


@dataclass(frozen=True, slots=True)
class RetryLimit:
    """A bound on retries besides the deadline (Spark's ``fetchOffset.numRetries`` and
    ``fetchOffset.retryIntervalMs``): at most ``retries`` retries (None: no count), each
    after ``interval_s`` (None: the exponential backoff)."""

    retries: int | None = None
    interval_s: float | None = None


class Backoff:
    """Exponential backoff (100 ms doubling to 2 s) until ``deadline`` (``time.monotonic()``),
    or the fixed interval and retry count of a ``RetryLimit``.

    A schedule, not a sleeper: ``next_delay`` says how long to wait before the next attempt
    (or raises ``ConnectorError`` once that wait would pass the deadline or the retries
    are used up), and the caller sleeps it with ``time.sleep`` or ``await asyncio.sleep``.
    """

    __slots__ = ("attempts", "deadline", "delay", "limit", "what")

    def __init__(self, deadline: float, what: str, limit: RetryLimit | None = None) -> None:
        self.deadline = deadline
        self.limit = limit or RetryLimit()
        self.delay = self._first_delay()
        self.what = what
        self.attempts = 0

    def _first_delay(self) -> float:
        return BACKOFF_START_S if self.limit.interval_s is None else self.limit.interval_s

    def next_delay(self, now: float, reason: object) -> float:
        """The wait before the next attempt, the last one having failed with ``reason``."""
        self.attempts += 1
        retries = self.limit.retries
        if now + self.delay > self.deadline or (retries is not None and self.attempts > retries):
            raise ConnectorError(
                f"{self.what}: gave up after {self.attempts} attempts; last error: {reason}"
            )
        log.info("%s: retrying in %.1fs after %s", self.what, self.delay, reason)
        delay = self.delay
        if self.limit.interval_s is None:
            self.delay = min(delay * 2, BACKOFF_MAX_S)
        return delay

    def reset(self) -> None:
        """Back to the shortest wait (an attempt succeeded)."""
        self.delay = self._first_delay()


def wait(backoff: Backoff, reason: object) -> None:
    """Sleep ``backoff``'s next delay in this thread."""
    time.sleep(backoff.next_delay(time.monotonic(), reason))


class Session:
    """A lazily opened ``BlockingClient`` (or the ``client`` given) with retry-with-refresh
    around calls."""

    def __init__(
        self,
        bootstrap: str,
        client_id: str,
        request_timeout_ms: int,
        security_properties: SecurityProperties = (),
        *,
        client: BlockingClient | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.request_timeout_s = request_timeout_ms / 1000
        #: The client's ``kafka.security.*``/``sasl.*``/``ssl.*`` properties (plain strings:
        #: the ``ClientSecurity`` and its SSLContext are built here, on this process).
        self.security_properties = security_properties
        self._client: BlockingClient | None = client

    @property
    def client(self) -> BlockingClient:
        if self._client is None:
            security = client_security(self.security_properties)
            self._client = BlockingClient(
                self.bootstrap,
                client_id=self.client_id,
                request_timeout_s=self.request_timeout_s,
                connect_timeout_s=min(10.0, self.request_timeout_s),
                security=security,
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            try:
                client.close()
            except Exception:  # closing after a broken connection must not mask the cause
                log.debug("closing the client failed", exc_info=True)

    def refresh(self, topics: Sequence[str] | None) -> None:
        try:
            self.client.metadata(topics)
        except (ClientConnectionError, ClientTimeoutError) as exc:
            log.info("metadata refresh failed: %s", exc)

    def call(
        self,
        fn: Callable[[BlockingClient], T],
        *,
        what: str,
        timeout_s: float,
        topics: Sequence[str] | None = None,
        limit: RetryLimit | None = None,
    ) -> T:
        """``fn(client)``, retried on connection errors and ``RetryableError`` until the
        deadline (and within ``limit``), with a metadata refresh before each retry."""
        backoff = Backoff(time.monotonic() + timeout_s, what, limit)
        while True:
            try:
                return fn(self.client)
            except (ClientConnectionError, ClientTimeoutError, RetryableError) as exc:
                wait(backoff, exc)
                self.refresh(topics)
