"""The broker's side of SASL on a SASL_PLAINTEXT / SASL_SSL listener (Kafka's
``SaslServerAuthenticator``, KIP-43 and KIP-152): one ``SaslServerAuthenticator`` per
connection, made by the listener's ``SaslAuthenticatorFactory``.

Rules (the dispatcher routes a connection's frames here until ``complete``):

1. Order: SaslHandshake (17) names the mechanism, then the mechanism's tokens follow,
   either in SaslAuthenticate (36) requests (SaslHandshake v1+) or, after SaslHandshake v0,
   as raw size-prefixed frames without a Kafka header (``expects_raw_token``; answered by
   raw frames, ``raw_token``). ApiVersions before the handshake is the dispatcher's.
2. SaslHandshake: a mechanism that is not enabled on this listener is answered
   UNSUPPORTED_SASL_MECHANISM (33) with the enabled list; a handshake in the middle of an
   exchange ILLEGAL_SASL_STATE (34). Both fail the connection (Kafka closes it after the
   answer). After authentication, a handshake (re-authentication, KIP-368, which we do not
   offer) is answered ILLEGAL_SASL_STATE and the connection stays, as Kafka's
   ``KafkaApis`` does.
3. SaslAuthenticate: a failed exchange is answered SASL_AUTHENTICATION_FAILED (58) with the
   mechanism's message (``AuthenticationError``'s text: Kafka's wording, never a secret) and
   ``failed`` becomes True: the dispatcher writes the answer, then closes. SaslAuthenticate
   before a v1 handshake (or after a v0 one) is ILLEGAL_SASL_STATE and fails; after
   authentication it is ILLEGAL_SASL_STATE ("SaslAuthenticate request received after
   successful authentication") without failing. v1+ answers ``session_lifetime_ms`` 0:
   no re-authentication is required (KIP-368's ``connections.max.reauth.ms`` = 0).
4. In the raw (v0) exchange a failure raises ``CloseConnection``: Kafka just closes.
5. A token larger than ``sasl.server.max.receive.size`` (default 524288) fails the exchange
   before the mechanism sees it.
6. Mechanisms: PLAIN (``tidelog.security.plain``) against the listener's JAAS users;
   SCRAM-SHA-256/512 (``tidelog.security.scram``) against ``scram_lookup``, which must
   answer from memory (``UserCredentialCache.lookup``): authentication never waits.
7. Each failure is logged once, at INFO, with the listener, mechanism, user (when known)
   and the reason; never a password or a token. The dispatcher adds the peer's address.
8. Once complete, ``principal`` is ``User:<name>``.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from kio.index import load_response_schema

from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.messages import build
from tidelog.security import plain
from tidelog.security.errors import AuthenticationError, SecurityConfigError
from tidelog.security.principal import KafkaPrincipal
from tidelog.security.scram import ScramCredential, ScramMechanism, ScramServer
from tidelog.server.network.connection import CloseConnection

log = logging.getLogger(__name__)

#: Kafka's ``sasl.server.max.receive.size`` default.
DEFAULT_MAX_RECEIVE_SIZE: Final = 524288
SUPPORTED_MECHANISMS: Final = (
    plain.MECHANISM,
    ScramMechanism.SCRAM_SHA_256.value,
    ScramMechanism.SCRAM_SHA_512.value,
)
AFTER_AUTHENTICATION_MESSAGE: Final = (
    "SaslAuthenticate request received after successful authentication"
)

ScramLookup = Callable[[str, ScramMechanism], ScramCredential | None]


class _Exchange(Protocol):
    """One mechanism's server side: tokens in, tokens out, ``AuthenticationError`` on
    failure (its message is the client's)."""

    @property
    def complete(self) -> bool: ...
    @property
    def username(self) -> str | None: ...
    @property
    def failure_reason(self) -> str | None: ...
    def evaluate(self, token: bytes) -> bytes: ...


class _PlainExchange:
    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username: str | None = None
        self.failure_reason: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            self.failure_reason = "a PLAIN token after the exchange completed"
            raise AuthenticationError(plain.INVALID_CREDENTIALS_MESSAGE)
        try:
            message = plain.PlainMessage.parse(token)
        except AuthenticationError as exc:
            self.failure_reason = str(exc)
            raise
        self.username = message.username
        try:
            plain.authenticate(token, self._users)
        except AuthenticationError as exc:
            if str(exc) != plain.INVALID_CREDENTIALS_MESSAGE:
                self.failure_reason = str(exc)
            elif message.username in self._users:
                self.failure_reason = "wrong password"
            else:
                self.failure_reason = "unknown user"
            raise
        self.complete = True
        return b""


class _ScramExchange:
    def __init__(self, mechanism: ScramMechanism, lookup: ScramLookup) -> None:
        self._server = ScramServer(mechanism, lambda user: lookup(user, mechanism))

    @property
    def complete(self) -> bool:
        return self._server.complete

    @property
    def username(self) -> str | None:
        return self._server.username

    @property
    def failure_reason(self) -> str | None:
        return self._server.failure_reason

    def evaluate(self, token: bytes) -> bytes:
        return self._server.receive(token)


class _Stage(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


def _response(api_key: ApiKey, version: int, data: Mapping[str, Any]) -> Any:
    return build(load_response_schema(api_key, version), data)


class SaslServerAuthenticator:
    """One connection's SASL state (rules 1-8). Made by ``SaslAuthenticatorFactory.new``."""

    def __init__(
        self,
        listener_name: str,
        enabled_mechanisms: Sequence[str],
        plain_users: Mapping[str, str],
        scram_lookup: ScramLookup,
        max_receive_size: int,
    ) -> None:
        self.listener_name = listener_name
        self.enabled_mechanisms = tuple(enabled_mechanisms)
        self._plain_users = plain_users
        self._scram_lookup = scram_lookup
        self.max_receive_size = max_receive_size
        self._stage = _Stage.HANDSHAKE
        self._exchange: _Exchange | None = None
        #: The mechanism the handshake chose (None before).
        self.mechanism: str | None = None
        #: True after a SaslHandshake v0 until the exchange ends: the next frame is a raw
        #: token, not a Kafka request (rule 1).
        self.expects_raw_token = False
        self.principal: KafkaPrincipal | None = None
        #: What the client was told on failure (None before one).
        self.failure_message: str | None = None

    @property
    def complete(self) -> bool:
        return self._stage is _Stage.COMPLETE

    @property
    def failed(self) -> bool:
        return self._stage is _Stage.FAILED

    # -- failures -------------------------------------------------------------------------------

    def _fail(self, message: str, reason: str, user: str | None = None) -> None:
        """Rule 7: one log line per failed connection."""
        self._stage = _Stage.FAILED
        self.expects_raw_token = False
        self._exchange = None
        self.failure_message = message
        log.info(
            "SASL authentication failed on listener %s: mechanism %s, user %s: %s",
            self.listener_name,
            self.mechanism or "(none)",
            repr(user) if user is not None else "(unknown)",
            reason,
        )

    # -- SaslHandshake (17) ---------------------------------------------------------------------

    def handle_handshake(self, version: int, body: Any) -> Any:
        mechanism = str(body.mechanism)
        if self._stage is _Stage.COMPLETE:
            return _response(
                ApiKey.SASL_HANDSHAKE,
                version,
                {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []},
            )
        if self._stage is not _Stage.HANDSHAKE:
            if not self.failed:
                self._fail(
                    f"Unexpected handshake request with client mechanism {mechanism}",
                    "SaslHandshake during the SASL exchange",
                    self._exchange.username if self._exchange is not None else None,
                )
            return _response(
                ApiKey.SASL_HANDSHAKE,
                version,
                {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []},
            )
        if mechanism not in self.enabled_mechanisms:
            self._fail(
                f"Unsupported SASL mechanism {mechanism}",
                f"mechanism {mechanism!r} is not enabled (enabled: "
                f"{', '.join(self.enabled_mechanisms)})",
            )
            return _response(
                ApiKey.SASL_HANDSHAKE,
                version,
                {
                    "error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                    "mechanisms": list(self.enabled_mechanisms),
                },
            )
        self.mechanism = mechanism
        self._exchange = self._new_exchange(mechanism)
        self._stage = _Stage.AUTHENTICATE
        self.expects_raw_token = version == 0
        return _response(
            ApiKey.SASL_HANDSHAKE,
            version,
            {"error_code": ErrorCode.NONE, "mechanisms": list(self.enabled_mechanisms)},
        )

    def _new_exchange(self, mechanism: str) -> _Exchange:
        scram = ScramMechanism.from_name(mechanism)
        if scram is not None:
            return _ScramExchange(scram, self._scram_lookup)
        return _PlainExchange(self._plain_users)

    # -- SaslAuthenticate (36) ------------------------------------------------------------------

    def handle_authenticate(self, version: int, body: Any) -> Any:
        if self._stage is _Stage.COMPLETE:
            return self._authenticate_response(
                version, ErrorCode.ILLEGAL_SASL_STATE, AFTER_AUTHENTICATION_MESSAGE
            )
        exchange = self._exchange
        if self._stage is not _Stage.AUTHENTICATE or self.expects_raw_token or exchange is None:
            message = "Unexpected Kafka request of type SASL_AUTHENTICATE during SASL handshake."
            if not self.failed:
                self._fail(message, "SaslAuthenticate before a SaslHandshake v1+")
            return self._authenticate_response(version, ErrorCode.ILLEGAL_SASL_STATE, message)
        try:
            challenge = self._evaluate(exchange, bytes(body.auth_bytes))
        except AuthenticationError as exc:
            return self._authenticate_response(
                version, ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc)
            )
        return self._authenticate_response(version, ErrorCode.NONE, None, challenge)

    def _authenticate_response(
        self, version: int, error: ErrorCode, message: str | None, auth_bytes: bytes = b""
    ) -> Any:
        return _response(
            ApiKey.SASL_AUTHENTICATE,
            version,
            {
                "error_code": error,
                "error_message": message,
                "auth_bytes": auth_bytes,
                "session_lifetime": 0,
            },
        )

    # -- the raw (SaslHandshake v0) exchange ----------------------------------------------------

    def raw_token(self, frame: bytes) -> bytes:
        """One raw client token (a frame's payload) in; the raw server token out (rule 4)."""
        exchange = self._exchange
        if not self.expects_raw_token or exchange is None:
            raise CloseConnection("unexpected raw SASL token")
        try:
            return self._evaluate(exchange, bytes(frame))
        except AuthenticationError as exc:
            raise CloseConnection(f"SASL authentication failed: {exc}") from None

    # -- both -----------------------------------------------------------------------------------

    def _evaluate(self, exchange: _Exchange, token: bytes) -> bytes:
        """Run the mechanism on one token; failures are ``AuthenticationError`` (logged,
        ``failed`` set)."""
        if len(token) > self.max_receive_size:
            message = (
                f"Invalid SASL token size {len(token)} larger than "
                f"sasl.server.max.receive.size {self.max_receive_size}"
            )
            self._fail(message, message, exchange.username)
            raise AuthenticationError(message)
        try:
            challenge = exchange.evaluate(token)
        except AuthenticationError as exc:
            self._fail(str(exc), exchange.failure_reason or str(exc), exchange.username)
            raise
        if exchange.complete:
            user = exchange.username
            assert user is not None
            self._stage = _Stage.COMPLETE
            self.expects_raw_token = False
            self._exchange = None
            self.principal = KafkaPrincipal.user(user)
            log.debug(
                "SASL %s authentication of %s on listener %s complete",
                self.mechanism,
                self.principal,
                self.listener_name,
            )
        return challenge


class SaslAuthenticatorFactory:
    """What a broker's SASL listeners share: the enabled mechanisms (Kafka's
    ``sasl.enabled.mechanisms``), PLAIN users per listener name (from each listener's JAAS
    config) and the SCRAM credentials' lookup (rule 6)."""

    def __init__(
        self,
        enabled_mechanisms: Sequence[str],
        plain_users: Mapping[str, Mapping[str, str]],
        scram_lookup: ScramLookup,
        max_receive_size: int = DEFAULT_MAX_RECEIVE_SIZE,
    ) -> None:
        unknown = [m for m in enabled_mechanisms if m not in SUPPORTED_MECHANISMS]
        if unknown:
            raise SecurityConfigError(
                "sasl.enabled.mechanisms",
                f"unsupported mechanism(s) {', '.join(unknown)}; tidelog supports "
                f"{', '.join(SUPPORTED_MECHANISMS)}",
            )
        if not enabled_mechanisms:
            raise SecurityConfigError("sasl.enabled.mechanisms", "no mechanism is enabled")
        if max_receive_size <= 0:
            raise SecurityConfigError("sasl.server.max.receive.size", "must be positive")
        self.enabled_mechanisms = tuple(dict.fromkeys(enabled_mechanisms))
        self.plain_users = plain_users
        self.scram_lookup = scram_lookup
        self.max_receive_size = max_receive_size

    def new(self, listener_name: str) -> SaslServerAuthenticator:
        return SaslServerAuthenticator(
            listener_name,
            self.enabled_mechanisms,
            self.plain_users.get(listener_name, {}),
            self.scram_lookup,
            self.max_receive_size,
        )


__all__ = [
    "AFTER_AUTHENTICATION_MESSAGE",
    "DEFAULT_MAX_RECEIVE_SIZE",
    "SUPPORTED_MECHANISMS",
    "SaslAuthenticatorFactory",
    "SaslServerAuthenticator",
    "ScramLookup",
]
