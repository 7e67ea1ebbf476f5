"""SASL PLAIN (RFC 4616) and the JAAS configuration strings that carry its users (Kafka's
``PlainLoginModule``, ``sasl.jaas.config``).

Rules:

1. A PLAIN message is ``[authzid] NUL authcid NUL passwd`` in UTF-8 (RFC 4616 section 2).
   Exactly three fields (Kafka's ``PlainSaslServer``: "Invalid SASL/PLAIN response:
   expected 3 tokens, got N"), user and password non-empty ("Authentication failed:
   username not specified" / "password not specified").
2. An authzid, when present, must equal the user (Kafka: "Authentication failed: Client
   requested an authorization id that is different from username"); the principal is the
   user (``User:<authcid>``).
3. Users and passwords come from the broker's JAAS config, options ``user_<name>="<pw>"``
   (Kafka's ``PlainServerCallbackHandler``). An unknown user and a wrong password get the
   same answer, "Authentication failed: Invalid username or password", and the password
   comparison is constant-time (``hmac.compare_digest``), so neither answer nor timing tells
   which it was.
4. JAAS syntax (what Kafka's ``JaasConfig`` accepts for one login module):
   ``<LoginModuleClass> <flag> [<key>=<value>]... ;`` where flag is required, requisite,
   sufficient or optional (any case), a value is a double-quoted string (escapes ``\\"``,
   ``\\\\``, ``\\n``, ``\\t``, ``\\r``; any other ``\\c`` is ``c``) or a bare word, and
   ``//`` and ``/* */`` comments are skipped. Exactly one module. Every error is a
   ``SecurityConfigError`` naming the property the text came from; messages never quote a
   value (it may be a password).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tidelog.security.errors import AuthenticationError, SecurityConfigError

MECHANISM: Final = "PLAIN"
PLAIN_LOGIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
#: Rule 3's one answer for an unknown user or a wrong password.
INVALID_CREDENTIALS_MESSAGE: Final = "Authentication failed: Invalid username or password"
AUTHZID_MISMATCH_MESSAGE: Final = (
    "Authentication failed: Client requested an authorization id that is different from username"
)
CONTROL_FLAGS: Final = frozenset({"required", "requisite", "sufficient", "optional"})
_USER_PREFIX: Final = "user_"


# -- the message ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlainMessage:
    """One PLAIN initial response (rule 1). ``repr`` hides the password."""

    authzid: str
    username: str
    password: str

    def __repr__(self) -> str:
        return f"PlainMessage(authzid={self.authzid!r}, username={self.username!r})"

    def encode(self) -> bytes:
        return f"{self.authzid}\0{self.username}\0{self.password}".encode()

    @classmethod
    def parse(cls, data: bytes) -> PlainMessage:
        """Rule 1; ``AuthenticationError`` with Kafka's message when it does not hold."""
        text = data.decode("utf-8", errors="replace")
        tokens = text.split("\0")
        if len(tokens) != 3:
            # Kafka counts at most 4 (it stops splitting there).
            raise AuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(tokens), 4)}"
            )
        authzid, username, password = tokens
        if not username:
            raise AuthenticationError("Authentication failed: username not specified")
        if not password:
            raise AuthenticationError("Authentication failed: password not specified")
        return cls(authzid, username, password)


def passwords_equal(given: str, expected: str) -> bool:
    """Constant-time comparison (rule 3)."""
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def authenticate(token: bytes, users: Mapping[str, str]) -> str:
    """Check one PLAIN message against ``users`` (name -> password); the user on success,
    else ``AuthenticationError`` carrying what the client is told (rules 1-3)."""
    message = PlainMessage.parse(token)
    expected = users.get(message.username)
    # Compare against something even for an unknown user: the same work either way.
    ok = passwords_equal(message.password, expected if expected is not None else "\0")
    if expected is None or not ok:
        raise AuthenticationError(INVALID_CREDENTIALS_MESSAGE)
    if message.authzid and message.authzid != message.username:
        raise AuthenticationError(AUTHZID_MISMATCH_MESSAGE)
    return message.username


# -- JAAS configuration ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JaasConfig:
    """One login module's entry (rule 4). ``repr`` lists option keys only (values may be
    passwords)."""

    login_module: str
    control_flag: str
    options: Mapping[str, str]

    def __repr__(self) -> str:
        return (
            f"JaasConfig(login_module={self.login_module!r}, control_flag="
            f"{self.control_flag!r}, options={sorted(self.options)!r})"
        )


_PUNCT: Final = frozenset("=;")


class _Tokens:
    """Rule 4's lexer: words, quoted strings (kind ``"``) and the punctuation ``=`` ``;``."""

    def __init__(self, text: str, key: str) -> None:
        self.text = text
        self.key = key
        self.pos = 0

    def error(self, message: str) -> SecurityConfigError:
        return SecurityConfigError(self.key, f"invalid JAAS config: {message}")

    def _skip(self) -> None:
        text = self.text
        while self.pos < len(text):
            if text[self.pos].isspace():
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end + 1
            elif text.startswith("/*", self.pos):
                end = text.find("*/", self.pos + 2)
                if end < 0:
                    raise self.error("unterminated comment")
                self.pos = end + 2
            else:
                return

    def next(self) -> tuple[str, str] | None:
        """(kind, text): kind ``word``, ``quoted`` or the punctuation itself; None at end."""
        self._skip()
        text = self.text
        if self.pos >= len(text):
            return None
        ch = text[self.pos]
        if ch in _PUNCT:
            self.pos += 1
            return ch, ch
        if ch == '"':
            return "quoted", self._quoted()
        start = self.pos
        while self.pos < len(text):
            c = text[self.pos]
            if c.isspace() or c in _PUNCT or c == '"' or text.startswith(("//", "/*"), self.pos):
                break
            self.pos += 1
        return "word", text[start : self.pos]

    def _quoted(self) -> str:
        text = self.text
        self.pos += 1
        out: list[str] = []
        escapes = {"n": "\n", "t": "\t", "r": "\r"}
        while self.pos < len(text):
            c = text[self.pos]
            if c == "\\":
                if self.pos + 1 >= len(text):
                    break
                nxt = text[self.pos + 1]
                out.append(escapes.get(nxt, nxt))
                self.pos += 2
            elif c == '"':
                self.pos += 1
                return "".join(out)
            else:
                out.append(c)
                self.pos += 1
        raise self.error("unterminated quoted value")


def parse_jaas_config(text: str, *, key: str = "sasl.jaas.config") -> JaasConfig:
    """One login module's entry (rule 4); ``SecurityConfigError(key, ...)`` otherwise."""
    tokens = _Tokens(text, key)
    module = tokens.next()
    if module is None:
        raise tokens.error("empty: expected '<LoginModule> <flag> [key=value ...];'")
    if module[0] != "word":
        raise tokens.error("expected a login module class name first")
    flag = tokens.next()
    if flag is None or flag[0] != "word" or flag[1].lower() not in CONTROL_FLAGS:
        raise tokens.error(
            f"expected a control flag ({', '.join(sorted(CONTROL_FLAGS))}) after {module[1]!r}"
        )
    options: dict[str, str] = {}
    while True:
        token = tokens.next()
        if token is None:
            raise tokens.error("missing ';' at the end of the login module entry")
        if token[0] == ";":
            break
        if token[0] != "word":
            raise tokens.error("expected an option name")
        name = token[1]
        equals = tokens.next()
        if equals is None or equals[0] != "=":
            raise tokens.error(f"expected '=' after option {name!r}")
        value = tokens.next()
        if value is None or value[0] not in ("word", "quoted"):
            raise tokens.error(f"option {name!r} has no value")
        if name in options:
            raise tokens.error(f"option {name!r} given twice")
        options[name] = value[1]
    if tokens.next() is not None:
        raise tokens.error("more than one login module: expected exactly one")
    return JaasConfig(module[1], flag[1].lower(), options)


def plain_users(jaas: JaasConfig) -> dict[str, str]:
    """The ``user_<name>`` options: name -> password (rule 3)."""
    return {
        name[len(_USER_PREFIX) :]: value
        for name, value in jaas.options.items()
        if name.startswith(_USER_PREFIX) and len(name) > len(_USER_PREFIX)
    }


__all__ = [
    "AUTHZID_MISMATCH_MESSAGE",
    "CONTROL_FLAGS",
    "INVALID_CREDENTIALS_MESSAGE",
    "MECHANISM",
    "PLAIN_LOGIN_MODULE",
    "JaasConfig",
    "PlainMessage",
    "authenticate",
    "parse_jaas_config",
    "passwords_equal",
    "plain_users",
]
