"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677; Kafka's KIP-84): credentials and
the server's and the client's side of the exchange, as pure state machines.

Rules and invariants:

1. Mechanisms are Kafka's two: SCRAM-SHA-256 (AlterUserScramCredentials mechanism type 1)
   and SCRAM-SHA-512 (type 2). Iterations are 4096..16384 (Kafka's ``minIterations`` and
   ``ZkAdminManager``'s maximum); a stored credential outside that range never
   authenticates.
2. A credential is what RFC 5802 section 3 lets the server keep: ``salt``, ``StoredKey =
   H(HMAC(SaltedPassword, "Client Key"))``, ``ServerKey = HMAC(SaltedPassword, "Server
   Key")`` and the iteration count, with ``SaltedPassword = Hi(password, salt, i)``
   (PBKDF2-HMAC-H). The password is taken as its UTF-8 bytes (Kafka's ``ScramFormatter``
   does no SASLprep). Its string form is Kafka's ZooKeeper one (``ScramCredentialUtils``):
   ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``.
3. The exchange (RFC 5802 section 5): client-first ``n,[a=<authzid>],n=<user>,r=<cnonce>``;
   server-first ``r=<cnonce><snonce>,s=<b64 salt>,i=<n>``; client-final ``c=<b64 gs2
   header>,r=<nonce>,p=<b64 ClientProof>``; server-final ``v=<b64 ServerSignature>``.
   ``AuthMessage`` = client-first-bare "," server-first "," client-final-without-proof.
4. The server accepts only the gs2 header without channel binding (``n``, as Kafka: no
   ``-PLUS`` mechanism is offered), an authzid only when it equals the user (Kafka's
   "Client requested an authorization id that is different from username"), rejects the
   reserved ``m=`` extension (RFC 5802 section 5.1) and Kafka's ``tokenauth`` extension
   (no delegation tokens here), and ignores other extensions (as Kafka).
5. User names travel as saslname (RFC 5802 section 5.1): ``,`` as ``=2C`` and ``=`` as
   ``=3D``; any other ``=`` is malformed.
6. The client-final message must echo the gs2 header (``c=``) and exactly the nonce the
   server sent (client nonce + server nonce); the one exception is librdkafka < 2.6.1's
   client nonce + the whole nonce (see ``_on_client_final``). The proof is checked as
   RFC 5802 section 3 says: ``ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage)``
   and ``H(ClientKey)`` must equal StoredKey (compared in constant time).
7. Every failure raises ``AuthenticationError`` whose message is what the client is told:
   Kafka's "Authentication failed during authentication due to invalid credentials with
   SASL mechanism <mechanism>" for an unknown user, a bad proof and any malformed message
   (Kafka answers every ``SaslException`` so). The server keeps the real reason in
   ``failure_reason`` for the broker's log; it is never sent and never holds a secret.
   An unknown user fails at the client-first message, as in Kafka (no fake salt).
8. Nonces come from ``secrets``; either side's may be fixed for tests (the RFC vectors).
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from tidelog.security.errors import AuthenticationError, SecurityConfigError

#: Kafka's ``ScramMechanism.minIterations`` (both mechanisms) and the most iterations
#: AlterUserScramCredentials accepts (``ZkAdminManager``).
MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 16384
DEFAULT_ITERATIONS: Final = MIN_ITERATIONS

#: The gs2 header this implementation speaks: no channel binding, no authzid.
GS2_HEADER: Final = "n,,"

_CLIENT_KEY: Final = b"Client Key"
_SERVER_KEY: Final = b"Server Key"


class ScramMechanism(enum.Enum):
    """Kafka's ``org.apache.kafka.clients.admin.ScramMechanism``; the value is the name."""

    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"

    @property
    def mechanism_name(self) -> str:
        return self.value

    @property
    def type_id(self) -> int:
        """The ``mechanism`` of AlterUserScramCredentials and DescribeUserScramCredentials."""
        return _TYPE_IDS[self]

    @property
    def hash_name(self) -> str:
        """The ``hashlib`` name of H."""
        return _HASH_NAMES[self]

    @property
    def min_iterations(self) -> int:
        return MIN_ITERATIONS

    @property
    def max_iterations(self) -> int:
        return MAX_ITERATIONS

    @classmethod
    def from_type(cls, type_id: int) -> ScramMechanism | None:
        """The mechanism of a wire type (None: Kafka's ``UNKNOWN``, type 0 included)."""
        return _BY_TYPE.get(type_id)

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism | None:
        try:
            return cls(name)
        except ValueError:
            return None


_TYPE_IDS: Final[Mapping[ScramMechanism, int]] = {
    ScramMechanism.SCRAM_SHA_256: 1,
    ScramMechanism.SCRAM_SHA_512: 2,
}
_BY_TYPE: Final[Mapping[int, ScramMechanism]] = {v: k for k, v in _TYPE_IDS.items()}
_HASH_NAMES: Final[Mapping[ScramMechanism, str]] = {
    ScramMechanism.SCRAM_SHA_256: "sha256",
    ScramMechanism.SCRAM_SHA_512: "sha512",
}


# -- the arithmetic (RFC 5802 section 3), for any hash --------------------------------------------


def hi(hash_name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's ``Hi()``: PBKDF2 with HMAC-H and one block of H's size."""
    return hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def _h(hash_name: str, data: bytes) -> bytes:
    return hashlib.new(hash_name, data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def client_key(hash_name: str, salted_password: bytes) -> bytes:
    return _hmac(hash_name, salted_password, _CLIENT_KEY)


def stored_key(hash_name: str, salted_password: bytes) -> bytes:
    return _h(hash_name, client_key(hash_name, salted_password))


def server_key(hash_name: str, salted_password: bytes) -> bytes:
    return _hmac(hash_name, salted_password, _SERVER_KEY)


def client_proof(hash_name: str, salted_password: bytes, auth_message: bytes) -> bytes:
    """``ClientKey XOR HMAC(StoredKey, AuthMessage)``."""
    signature = _hmac(hash_name, stored_key(hash_name, salted_password), auth_message)
    return _xor(client_key(hash_name, salted_password), signature)


def server_signature(hash_name: str, server_key_: bytes, auth_message: bytes) -> bytes:
    return _hmac(hash_name, server_key_, auth_message)


def verify_client_proof(
    hash_name: str, stored_key_: bytes, auth_message: bytes, proof: bytes
) -> bool:
    """Rule 6: recover ClientKey from the proof and compare ``H(ClientKey)`` to StoredKey."""
    if len(proof) != len(stored_key_):
        return False
    signature = _hmac(hash_name, stored_key_, auth_message)
    recovered = _h(hash_name, _xor(proof, signature))
    return hmac.compare_digest(recovered, stored_key_)


# -- credentials ----------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    """Strict base64 (binascii.Error / ValueError on anything else)."""
    return base64.b64decode(text.encode("ascii"), validate=True)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server stores for one user and mechanism (rule 2); no password in it."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def format(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString``."""
        return (
            f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
            f"server_key={_b64(self.server_key)},iterations={self.iterations}"
        )

    @classmethod
    def parse(cls, text: str, *, key: str = "SCRAM credential") -> ScramCredential:
        """Kafka's ``credentialFromString``: exactly the four properties.
        ``SecurityConfigError(key, ...)`` otherwise (never quoting the key material)."""
        props: dict[str, str] = {}
        for token in text.split(","):
            name, sep, value = token.partition("=")
            if not sep or not name or name in props:
                raise SecurityConfigError(
                    key,
                    "credentials not valid: expected salt=..., "
                    "stored_key=..., server_key=..., iterations=...",
                )
            props[name] = value
        if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
            raise SecurityConfigError(
                key,
                f"credentials not valid: properties {sorted(props)}, expected "
                "['iterations', 'salt', 'server_key', 'stored_key']",
            )
        try:
            iterations = int(props["iterations"])
            return cls(
                salt=_unb64(props["salt"]),
                stored_key=_unb64(props["stored_key"]),
                server_key=_unb64(props["server_key"]),
                iterations=iterations,
            )
        except (ValueError, binascii.Error):
            raise SecurityConfigError(
                key, "credentials not valid: bad base64 or iteration count"
            ) from None


def new_salt() -> bytes:
    """A fresh random salt (32 bytes: more than Kafka's ~26-character random string)."""
    return secrets.token_bytes(32)


def credential_from_salted_password(
    mechanism: ScramMechanism, salt: bytes, salted_password: bytes, iterations: int
) -> ScramCredential:
    """Kafka's ``ScramFormatter.generateCredential(salt, saltedPassword, iterations)``, what
    AlterUserScramCredentials (KIP-554) carries: the client salts, the broker derives keys."""
    h = mechanism.hash_name
    return ScramCredential(
        salt=salt,
        stored_key=stored_key(h, salted_password),
        server_key=server_key(h, salted_password),
        iterations=iterations,
    )


def salted_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> bytes:
    return hi(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def make_credential(
    mechanism: ScramMechanism,
    password: str,
    *,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """A credential for ``password`` (a fresh salt unless one is given)."""
    if salt is None:
        salt = new_salt()
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted_password(mechanism, salt, salted, iterations)


# -- message syntax (RFC 5802 section 7) ----------------------------------------------------------


class _Malformed(Exception):  # noqa: N818 - internal signal, becomes AuthenticationError
    """A SCRAM message broke the syntax; the text is the reason for the log."""


def escape_saslname(name: str) -> str:
    """Rule 5: ``=`` as ``=3D``, ``,`` as ``=2C`` (``=`` first)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_saslname(text: str) -> str:
    """Rule 5's inverse; ``_Malformed`` for an empty name or a stray ``=``."""
    if not text:
        raise _Malformed("empty saslname")
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "=":
            code = text[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise _Malformed("invalid '=' escape in saslname")
            i += 3
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _is_printable(nonce: str) -> bool:
    """RFC 5802 ``printable``: %x21-2B / %x2D-7E (no comma, no space)."""
    return bool(nonce) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


def _attributes(text: str) -> list[tuple[str, str]]:
    """``k=v,k=v`` into pairs, in order; ``_Malformed`` for a part without ``=``."""
    out = []
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name:
            raise _Malformed(f"bad attribute {part[:20]!r}")
        out.append((name, value))
    return out


def _decode(message: bytes) -> str:
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise _Malformed("not UTF-8") from None
    if "\x00" in text:
        raise _Malformed("NUL in message")
    return text


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str
    authzid: str
    username: str
    nonce: str
    extensions: Mapping[str, str]
    bare: str

    @classmethod
    def parse(cls, message: bytes) -> ClientFirst:
        text = _decode(message)
        flag, sep1, rest = text.partition(",")
        authz, sep2, bare = rest.partition(",")
        if not sep1 or not sep2:
            raise _Malformed("no gs2 header")
        if flag != "n":
            raise _Malformed(f"gs2 channel binding flag {flag[:10]!r} (only 'n' is supported)")
        authzid = ""
        if authz:
            if not authz.startswith("a="):
                raise _Malformed("bad authzid in gs2 header")
            authzid = unescape_saslname(authz[2:])
        attrs = _attributes(bare)
        if attrs and attrs[0][0] == "m":
            raise _Malformed("reserved mandatory extension m=")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise _Malformed("expected n=<user>,r=<nonce>")
        nonce = attrs[1][1]
        if not _is_printable(nonce):
            raise _Malformed("client nonce is not printable")
        return cls(
            gs2_header=f"{flag},{authz},",
            authzid=authzid,
            username=unescape_saslname(attrs[0][1]),
            nonce=nonce,
            extensions=dict(attrs[2:]),
            bare=bare,
        )


@dataclass(frozen=True, slots=True)
class ServerFirst:
    nonce: str
    salt: bytes
    iterations: int

    def encode(self) -> str:
        return f"r={self.nonce},s={_b64(self.salt)},i={self.iterations}"

    @classmethod
    def parse(cls, message: bytes) -> ServerFirst:
        attrs = _attributes(_decode(message))
        if attrs and attrs[0][0] == "m":
            raise _Malformed("reserved mandatory extension m=")
        if len(attrs) < 3 or [a[0] for a in attrs[:3]] != ["r", "s", "i"]:
            raise _Malformed("expected r=<nonce>,s=<salt>,i=<iterations>")
        try:
            salt = _unb64(attrs[1][1])
            iterations = int(attrs[2][1])
        except (ValueError, binascii.Error):
            raise _Malformed("bad salt or iteration count") from None
        if not _is_printable(attrs[0][1]):
            raise _Malformed("nonce is not printable")
        return cls(attrs[0][1], salt, iterations)


@dataclass(frozen=True, slots=True)
class ClientFinal:
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str

    @classmethod
    def parse(cls, message: bytes) -> ClientFinal:
        text = _decode(message)
        without_proof, sep, proof_attr = text.rpartition(",")
        if not sep or not proof_attr.startswith("p="):
            raise _Malformed("no proof")
        attrs = _attributes(without_proof)
        if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
            raise _Malformed("expected c=<binding>,r=<nonce>")
        try:
            binding = _unb64(attrs[0][1])
            proof = _unb64(proof_attr[2:])
        except (ValueError, binascii.Error):
            raise _Malformed("bad base64 in channel binding or proof") from None
        return cls(binding, attrs[1][1], proof, without_proof)


# -- the server -----------------------------------------------------------------------------------


def invalid_credentials_message(mechanism: ScramMechanism | str) -> str:
    """Kafka's answer to any ``SaslException`` during authentication (rule 7)."""
    name = mechanism.value if isinstance(mechanism, ScramMechanism) else mechanism
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {name}"
    )


#: Kafka's ``SaslAuthenticationException`` text for an authzid that is not the user.
AUTHZID_MISMATCH_MESSAGE: Final = (
    "Authentication failed: Client requested an authorization id that is different from username"
)


class _State(enum.Enum):
    CLIENT_FIRST = "client-first"
    CLIENT_FINAL = "client-final"
    COMPLETE = "complete"
    FAILED = "failed"


def _new_nonce() -> str:
    return secrets.token_urlsafe(24)  # [A-Za-z0-9_-]: printable, no comma


class ScramServer:
    """One server-side exchange (rule 3). ``receive`` the client-first message (answers
    server-first), then the client-final one (answers server-final, ``complete`` is then
    True). Any failure raises ``AuthenticationError`` and the exchange is over."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: Callable[[str], ScramCredential | None],
        *,
        server_nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = server_nonce if server_nonce is not None else _new_nonce()
        self._state = _State.CLIENT_FIRST
        self._credential: ScramCredential | None = None
        self._client_first: ClientFirst | None = None
        self._server_first = ""
        #: The user of the client-first message, once it parsed (also after a failure).
        self.username: str | None = None
        #: Why the exchange failed (for the broker's log; never sent, no secrets).
        self.failure_reason: str | None = None

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def failed(self) -> bool:
        return self._state is _State.FAILED

    def _fail(self, reason: str, message: str | None = None) -> AuthenticationError:
        self._state = _State.FAILED
        self._credential = None
        self.failure_reason = reason
        return AuthenticationError(message or invalid_credentials_message(self.mechanism))

    def receive(self, message: bytes) -> bytes:
        """The next client message in; the server's answer out."""
        try:
            if self._state is _State.CLIENT_FIRST:
                return self._on_client_first(message)
            if self._state is _State.CLIENT_FINAL:
                return self._on_client_final(message)
        except _Malformed as exc:
            raise self._fail(f"malformed SCRAM message: {exc}") from None
        raise self._fail(f"unexpected SCRAM message in state {self._state.value}")

    def _on_client_first(self, message: bytes) -> bytes:
        first = ClientFirst.parse(message)
        self.username = first.username
        if first.extensions.get("tokenauth", "false").lower() == "true":
            raise self._fail("delegation tokens (tokenauth) are not supported")
        credential = self._lookup(first.username)
        if credential is None:
            raise self._fail("unknown user (no credential for this mechanism)")
        if first.authzid and first.authzid != first.username:
            raise self._fail("authorization id differs from the user", AUTHZID_MISMATCH_MESSAGE)
        if not MIN_ITERATIONS <= credential.iterations <= MAX_ITERATIONS:
            raise self._fail(
                f"stored credential has {credential.iterations} iterations, outside "
                f"{MIN_ITERATIONS}..{MAX_ITERATIONS}"
            )
        self._credential = credential
        self._client_first = first
        self._server_first = ServerFirst(
            first.nonce + self._server_nonce, credential.salt, credential.iterations
        ).encode()
        self._state = _State.CLIENT_FINAL
        return self._server_first.encode("ascii")

    def _on_client_final(self, message: bytes) -> bytes:
        final = ClientFinal.parse(message)
        first, credential = self._client_first, self._credential
        assert first is not None
        assert credential is not None
        if final.channel_binding != first.gs2_header.encode("utf-8"):
            raise self._fail("channel binding (c=) does not echo the gs2 header")
        expected = first.nonce + self._server_nonce
        # librdkafka before 2.6.1 (Debian's kcat among its users) echoes the client nonce
        # twice (confluentinc/librdkafka#4895); Kafka up to 3.9 accepted it. The nonce
        # still carries this exchange's fresh server nonce, and the proof covers the
        # message as sent, so the one known form is accepted and nothing else is.
        if final.nonce not in (expected, first.nonce + expected):
            raise self._fail("invalid client nonce in the final client message")
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode()
        h = self.mechanism.hash_name
        if not verify_client_proof(h, credential.stored_key, auth_message, final.proof):
            raise self._fail("invalid client proof (wrong password)")
        signature = server_signature(h, credential.server_key, auth_message)
        self._state = _State.COMPLETE
        self._credential = None
        return f"v={_b64(signature)}".encode("ascii")


# -- the client -----------------------------------------------------------------------------------


class ScramClient:
    """One client-side exchange: ``first_message()``, ``receive(server_first)`` (answers
    client-final), ``receive_final(server_final)`` (checks the server's signature: the
    server knew our credential). Failures raise ``AuthenticationError``."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        username: str,
        password: str,
        *,
        client_nonce: str | None = None,
    ) -> None:
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self._nonce = client_nonce if client_nonce is not None else _new_nonce()
        self._bare = f"n={escape_saslname(username)},r={self._nonce}"
        self._expected_signature: bytes | None = None
        self._state = "first"
        self.complete = False

    def first_message(self) -> bytes:
        if self._state != "first":
            raise AuthenticationError("SCRAM client: first message already sent")
        self._state = "server-first"
        return (GS2_HEADER + self._bare).encode("utf-8")

    def receive(self, server_first: bytes) -> bytes:
        """The server-first message in; the client-final message out."""
        if self._state != "server-first":
            raise AuthenticationError("SCRAM client: unexpected server-first message")
        self._state = "failed"
        try:
            first = ServerFirst.parse(server_first)
        except _Malformed as exc:
            raise AuthenticationError(f"Invalid SCRAM server first message: {exc}") from None
        if not first.nonce.startswith(self._nonce) or len(first.nonce) == len(self._nonce):
            raise AuthenticationError("Invalid server nonce: does not start with client nonce")
        if first.iterations < self.mechanism.min_iterations:
            raise AuthenticationError(
                f"Requested iterations {first.iterations} is less than the minimum "
                f"{self.mechanism.min_iterations} for {self.mechanism.value}"
            )
        h = self.mechanism.hash_name
        salted = salted_password(self.mechanism, self._password, first.salt, first.iterations)
        binding = _b64(GS2_HEADER.encode("ascii"))
        without_proof = f"c={binding},r={first.nonce}"
        # The AuthMessage holds the server-first message exactly as received.
        server_first_text = server_first.decode("utf-8")
        auth_message = f"{self._bare},{server_first_text},{without_proof}".encode()
        proof = client_proof(h, salted, auth_message)
        self._expected_signature = server_signature(h, server_key(h, salted), auth_message)
        self._state = "server-final"
        return f"{without_proof},p={_b64(proof)}".encode("ascii")

    def receive_final(self, server_final: bytes) -> None:
        if self._state != "server-final" or self._expected_signature is None:
            raise AuthenticationError("SCRAM client: unexpected server-final message")
        self._state = "failed"
        try:
            attrs = _attributes(_decode(server_final))
        except _Malformed as exc:
            raise AuthenticationError(f"Invalid SCRAM server final message: {exc}") from None
        name, value = attrs[0]
        if name == "e":
            raise AuthenticationError(
                f"Sasl authentication using {self.mechanism.value} failed with error: {value}"
            )
        try:
            signature = _unb64(value) if name == "v" else b""
        except (ValueError, binascii.Error):
            signature = b""
        if not hmac.compare_digest(signature, self._expected_signature):
            raise AuthenticationError("Sasl server signature verification failed")
        self._state = "complete"
        self.complete = True


__all__ = [
    "AUTHZID_MISMATCH_MESSAGE",
    "DEFAULT_ITERATIONS",
    "GS2_HEADER",
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "ScramClient",
    "ScramCredential",
    "ScramMechanism",
    "ScramServer",
    "client_proof",
    "credential_from_salted_password",
    "escape_saslname",
    "hi",
    "invalid_credentials_message",
    "make_credential",
    "new_salt",
    "salted_password",
    "server_key",
    "server_signature",
    "stored_key",
    "unescape_saslname",
    "verify_client_proof",
]
