"""The client's side of SASL (Kafka's ``SaslClientAuthenticator``, KIP-152): authenticate a
fresh connection to a SASL_PLAINTEXT / SASL_SSL listener before any other request.

Rules:

1. SaslHandshake v1 names the mechanism; the tokens then travel in SaslAuthenticate
   (v2, v1 or v0: the newest the broker advertises, v0 when nothing was negotiated). We
   never speak the v0 handshake's raw-token exchange.
2. PLAIN sends one token ``\\0user\\0password`` (RFC 4616; no authzid). SCRAM-SHA-256/512
   runs the three-message exchange of ``tidelog.security.scram`` and checks the server's
   signature: a broker that does not know our credential cannot pass for one that does.
3. Any refusal raises ``AuthenticationFailedError`` with the broker's words: an error in
   the handshake (UNSUPPORTED_SASL_MECHANISM: Kafka's "Client SASL mechanism '<m>' not
   enabled in the server, enabled mechanisms are [...]") or SASL_AUTHENTICATION_FAILED's
   ``error_message``; a server-final message that does not verify too. A connection that
   breaks meanwhile raises ``ClientConnectionError`` (from the connection).
4. An unknown mechanism is the caller's configuration error: ``SecurityConfigError`` on
   ``sasl.mechanism``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Final, Protocol

from kio.schema.sasl_authenticate.v0 import request as sasl_authenticate_v0
from kio.schema.sasl_authenticate.v1 import request as sasl_authenticate_v1
from kio.schema.sasl_authenticate.v2 import request as sasl_authenticate_v2
from kio.schema.sasl_handshake.v1 import request as sasl_handshake_v1

from tidelog.client.errors import AuthenticationFailedError
from tidelog.client.wire import error_code
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.security.errors import AuthenticationError, SecurityConfigError
from tidelog.security.plain import MECHANISM as PLAIN
from tidelog.security.plain import PlainMessage
from tidelog.security.scram import ScramClient, ScramMechanism

SUPPORTED_MECHANISMS: Final = (
    PLAIN,
    ScramMechanism.SCRAM_SHA_256.value,
    ScramMechanism.SCRAM_SHA_512.value,
)

_AUTHENTICATE_REQUESTS: Final[dict[int, Any]] = {
    2: sasl_authenticate_v2.SaslAuthenticateRequest,
    1: sasl_authenticate_v1.SaslAuthenticateRequest,
    0: sasl_authenticate_v0.SaslAuthenticateRequest,
}


class SaslConnection(Protocol):
    """What the exchange needs of a connection (``BrokerConnection`` is one): sending a
    request, and the versions the broker advertised (empty when none were negotiated)."""

    @property
    def api_versions(self) -> Mapping[int, tuple[int, int]]: ...

    def pick_version(self, api_key: ApiKey, preferred: tuple[int, ...]) -> int | None: ...

    async def send(self, body: Any) -> Any: ...


async def sasl_authenticate(
    conn: SaslConnection, *, mechanism: str, username: str, password: str
) -> None:
    """Authenticate ``conn`` as ``username`` (rules 1-4); returns once the broker agreed."""
    if mechanism not in SUPPORTED_MECHANISMS:
        raise SecurityConfigError(
            "sasl.mechanism",
            f"unsupported mechanism {mechanism!r}; supported: {', '.join(SUPPORTED_MECHANISMS)}",
        )
    handshake = await conn.send(sasl_handshake_v1.SaslHandshakeRequest(mechanism=mechanism))
    code = error_code(handshake.error_code)
    if code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
        enabled = ", ".join(str(m) for m in handshake.mechanisms)
        raise AuthenticationFailedError(
            f"Client SASL mechanism '{mechanism}' not enabled in the server, enabled "
            f"mechanisms are [{enabled}]"
        )
    if code != ErrorCode.NONE:
        raise AuthenticationFailedError(
            f"SaslHandshake for {mechanism} failed: {code.name} ({int(code)})"
        )
    version = 0
    if conn.api_versions:
        picked = conn.pick_version(ApiKey.SASL_AUTHENTICATE, (2, 1, 0))
        version = 0 if picked is None else picked
    request = _AUTHENTICATE_REQUESTS[version]

    async def exchange(token: bytes) -> bytes:
        response = await conn.send(request(auth_bytes=token))
        error = error_code(response.error_code)
        if error != ErrorCode.NONE:
            message = response.error_message or f"{error.name} ({int(error)})"
            raise AuthenticationFailedError(str(message))
        return bytes(response.auth_bytes)

    scram = ScramMechanism.from_name(mechanism)
    if scram is None:
        await exchange(PlainMessage("", username, password).encode())
        return
    client = ScramClient(scram, username, password)
    try:
        server_first = await exchange(client.first_message())
        # PBKDF2 (up to 16384 rounds) runs off the event loop.
        client_final = await asyncio.to_thread(client.receive, server_first)
        server_final = await exchange(client_final)
        client.receive_final(server_final)
    except AuthenticationError as exc:
        raise AuthenticationFailedError(str(exc)) from None


__all__ = ["SUPPORTED_MECHANISMS", "SaslConnection", "sasl_authenticate"]
