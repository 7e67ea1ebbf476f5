"""One connection to one broker: correlation ids, pipelining, timeouts.

Requests are written as they are sent (the broker answers in order, but responses are
matched by correlation id anyway); any number may be in flight. A reader task decodes
responses with ``tidelog.protocol.codec`` and resolves each request's future. When the
connection breaks, every pending request fails with ``ClientConnectionError``. A request
that times out fails with ``ClientTimeoutError``; its late response, if any, is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
from collections.abc import Callable
from typing import Any

from kio.schema.api_versions.v0 import request as api_versions_v0
from kio.schema.api_versions.v3 import request as api_versions_v3

from tidelog.aio import cancel_and_wait, wait_for
from tidelog.client.errors import (
    AuthenticationFailedError,
    ClientConnectionError,
    ClientTimeoutError,
)
from tidelog.client.sasl import sasl_authenticate
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import (
    EncodedRequest,
    RequestHeader,
    decode_response,
    encode_request,
    response_correlation_id,
)
from tidelog.protocol.errors import ProtocolError
from tidelog.protocol.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder
from tidelog.security.client_config import PLAINTEXT, ClientSecurity

logger = logging.getLogger(__name__)

DEFAULT_REQUEST_TIMEOUT_S = 30.0
DEFAULT_CONNECT_TIMEOUT_S = 10.0
_READ_CHUNK = 256 * 1024


class BrokerConnection:
    """An open connection to one broker (create with ``await BrokerConnection.connect``)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        host: str,
        port: int,
        client_id: str | None,
        request_timeout_s: float,
        max_frame_bytes: int,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self._reader = reader
        self._writer = writer
        self._decoder = FrameDecoder(max_frame_bytes)
        self._correlation_ids = itertools.count(1)
        # correlation id -> (future, api key, api version, decoder or None: the codec's)
        self._pending: dict[
            int, tuple[asyncio.Future[Any], int, int, Callable[[bytes], Any] | None]
        ] = {}
        self._closed: ClientConnectionError | None = None
        self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())
        #: What the broker advertises (filled by ``negotiate``): api key -> (min, max).
        self.api_versions: dict[int, tuple[int, int]] = {}

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        client_id: str | None = "tidelog",
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        negotiate: bool = True,
        security: ClientSecurity = PLAINTEXT,
    ) -> BrokerConnection:
        """Connect (and, with ``negotiate``, learn the broker's API versions), over TLS and
        logged in with SASL when ``security`` says so (SASL implies ``negotiate``).

        A certificate the client does not trust, or refused credentials, raise
        ``AuthenticationFailedError``: retrying cannot help."""
        tls = security.ssl_context if security.uses_tls else None
        try:
            reader, writer = await wait_for(
                asyncio.open_connection(
                    host,
                    port,
                    limit=_READ_CHUNK,
                    ssl=tls,
                    server_hostname=host if tls is not None and tls.check_hostname else None,
                ),
                connect_timeout_s,
                discard=lambda opened: opened[1].close(),  # cancelled as it connected
            )
        except ssl.SSLCertVerificationError as exc:
            raise AuthenticationFailedError(
                f"TLS handshake with {host}:{port} failed: {exc.verify_message or exc}"
            ) from exc
        except ssl.SSLError as exc:
            raise AuthenticationFailedError(
                f"TLS handshake with {host}:{port} failed: {exc.reason or exc}"
            ) from exc
        except (OSError, TimeoutError) as exc:
            raise ClientConnectionError(f"cannot connect to {host}:{port}: {exc}") from exc
        conn = cls(
            reader,
            writer,
            host=host,
            port=port,
            client_id=client_id,
            request_timeout_s=request_timeout_s,
            max_frame_bytes=max_frame_bytes,
        )
        if negotiate or security.uses_sasl:
            try:
                await conn.negotiate()
                if security.uses_sasl:
                    assert security.sasl_mechanism is not None
                    await sasl_authenticate(
                        conn,
                        mechanism=security.sasl_mechanism,
                        username=security.sasl_username,
                        password=security.sasl_password,
                    )
            except BaseException:
                await conn.close()
                raise
        return conn

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_closed(self) -> bool:
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def negotiate(self) -> dict[int, tuple[int, int]]:
        """ApiVersions v3, falling back to v0 when the broker does not know v3 (KIP-511)."""
        response = await self.send(
            api_versions_v3.ApiVersionsRequest(
                client_software_name="tidelog", client_software_version="0.1"
            )
        )
        if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
            response = await self.send(api_versions_v0.ApiVersionsRequest())
        self.api_versions = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
        }
        return self.api_versions

    def pick_version(self, api_key: ApiKey, preferred: tuple[int, ...]) -> int | None:
        """The first of ``preferred`` the broker advertises (None if none is)."""
        low, high = self.api_versions.get(api_key, (0, -1))
        for version in preferred:
            if low <= version <= high:
                return version
        return None

    def _next_header(self, body: Any) -> RequestHeader:
        if isinstance(body, EncodedRequest):
            api_key, version = body.api_key, body.api_version
        else:
            api_key, version = int(body.__api_key__), int(body.__version__)
        return RequestHeader(
            api_key, version, next(self._correlation_ids) & 0x7FFFFFFF, self.client_id
        )

    def _write(self, header: RequestHeader, body: Any) -> None:
        if self._closed is not None:
            raise self._closed
        self._writer.write(encode_request(header, body))

    async def send(
        self,
        body: Any,
        *,
        timeout_s: float | None = None,
        decode: Callable[[bytes], Any] | None = None,
    ) -> Any:
        """Send a request (a kio request entity or a control message); return the response.

        The API and version come from the body's schema. Raises ``ClientConnectionError``,
        ``ClientTimeoutError``, or ``InvalidResponseError`` for an undecodable answer.
        ``decode`` replaces the codec for this response: it gets the frame (size removed)
        and returns the body (for a response kio's schema cannot read, see
        ``tidelog.client.describe_txn``).
        """
        header = self._next_header(body)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[header.correlation_id] = (
            future,
            header.api_key,
            header.api_version,
            decode,
        )
        try:
            self._write(header, body)
            await self._writer.drain()
            timeout = self.request_timeout_s if timeout_s is None else timeout_s
            return await wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            raise ClientTimeoutError(
                f"{header.api_name} v{header.api_version} to {self.address}: no response "
                f"in {self.request_timeout_s if timeout_s is None else timeout_s} s"
            ) from None
        except (ConnectionError, OSError) as exc:
            raise ClientConnectionError(f"connection to {self.address} lost: {exc}") from exc
        finally:
            self._pending.pop(header.correlation_id, None)

    async def send_no_response(self, body: Any) -> None:
        """Send a request the broker will not answer (Produce with acks=0)."""
        header = self._next_header(body)
        try:
            self._write(header, body)
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            raise ClientConnectionError(f"connection to {self.address} lost: {exc}") from exc

    async def _read_loop(self) -> None:
        error: ClientConnectionError
        try:
            while True:
                data = await self._reader.read(_READ_CHUNK)
                if not data:
                    error = ClientConnectionError(f"{self.address} closed the connection")
                    break
                for payload in self._decoder.feed(data):
                    self._dispatch(payload)
        except ProtocolError as exc:
            error = ClientConnectionError(f"bad frame from {self.address}: {exc}")
        except (ConnectionError, OSError) as exc:
            error = ClientConnectionError(f"connection to {self.address} lost: {exc}")
        except asyncio.CancelledError:
            error = ClientConnectionError(f"connection to {self.address} closed")
            self._fail_all(error)
            raise
        self._fail_all(error)

    def _dispatch(self, payload: bytes) -> None:
        correlation_id = response_correlation_id(payload)
        entry = self._pending.pop(correlation_id, None)
        if entry is None:
            logger.debug("dropping response %d from %s: no one waits", correlation_id, self.address)
            return
        future, api_key, api_version, decode = entry
        if future.done():
            return
        try:
            if decode is None:
                _cid, body = decode_response(api_key, api_version, payload)
            else:
                body = decode(payload)
        except ProtocolError as exc:
            future.set_exception(exc)
        else:
            future.set_result(body)

    def _fail_all(self, error: ClientConnectionError) -> None:
        self._closed = error
        pending, self._pending = self._pending, {}
        for future, _key, _version, _decode in pending.values():
            if not future.done():
                future.set_exception(error)
        with contextlib.suppress(Exception):
            self._writer.close()

    async def close(self) -> None:
        """Close the connection; pending requests fail with ``ClientConnectionError``."""
        if self._closed is None:
            self._fail_all(ClientConnectionError(f"connection to {self.address} closed"))
        await cancel_and_wait(self._reader_task)
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()
