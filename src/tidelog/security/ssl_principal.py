"""The principal a client certificate proves: Kafka's SSL principal
(``DefaultKafkaPrincipalBuilder`` with ``SslPrincipalMapper``, KIP-371 mapping rules).

* No certificate -> ``User:ANONYMOUS``. Otherwise ``User:`` and the name the rules give the
  subject DN (``tidelog.security.x500.subject_dn``, as Java prints it).
* ``ssl.principal.mapping.rules``: comma-separated ``DEFAULT`` (the DN itself) and
  ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last slash; ``\\``
  escapes a ``/``. A rule applies when its pattern matches the whole DN; the name is then
  the DN with every match replaced (Java's ``replaceAll``: ``$1``, ``${name}``, ``\\$``); the
  first rule that applies wins, and a DN no rule applies to fails authentication. As in
  Kafka, ``$n`` past the pattern's last group is literal text; a rule that could never work
  (bad pattern, a lone ``$`` or ``\\``, ``$1`` in a pattern without groups) is refused when
  parsed, not at the first connection. "" (unset) means ``DEFAULT``.
"""

from __future__ import annotations

import functools
import re
import ssl
from dataclasses import dataclass
from typing import Final, TypeAlias

from tidelog.security.errors import AuthenticationError, SecurityConfigError
from tidelog.security.principal import ANONYMOUS, KafkaPrincipal
from tidelog.security.x500 import subject_dn

PRINCIPAL_MAPPING_RULES_KEY: Final = "ssl.principal.mapping.rules"


@dataclass(frozen=True, slots=True)
class _Group:
    """A group reference in a replacement: its number or name."""

    ref: int | str


_Piece: TypeAlias = str | _Group  # replacement text: literal text or a group


@dataclass(frozen=True, slots=True)
class PrincipalMappingRule:
    """One rule: ``DEFAULT`` (``pattern`` None) or ``RULE:pattern/replacement/[L|U]``."""

    text: str
    pattern: re.Pattern[str] | None = None
    replacement: tuple[_Piece, ...] = ()
    case: str = ""  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        """The name this rule gives ``dn``; None when the rule does not apply."""
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        name = self.pattern.sub(self._expand, dn)
        if self.case == "L":
            return name.lower()
        if self.case == "U":
            return name.upper()
        return name

    def _expand(self, match: re.Match[str]) -> str:
        return "".join(
            piece if isinstance(piece, str) else (match.group(piece.ref) or "")
            for piece in self.replacement
        )

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class PrincipalMappingRules:
    """Parsed ``ssl.principal.mapping.rules``: the first rule that applies names the DN."""

    rules: tuple[PrincipalMappingRule, ...]

    def name(self, dn: str) -> str | None:
        """The principal name for ``dn``; None when no rule applies."""
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        return None

    def __str__(self) -> str:
        return ",".join(str(rule) for rule in self.rules)


DEFAULT_RULES: Final = PrincipalMappingRules((PrincipalMappingRule("DEFAULT"),))

_JAVA_NAMED_GROUP: Final = re.compile(r"(?<!\\)\(\?<(?=[A-Za-z])")


def _rule_error(rule: str, message: str) -> SecurityConfigError:
    return SecurityConfigError(PRINCIPAL_MAPPING_RULES_KEY, f"rule {rule!r}: {message}")


def _until_slash(text: str, pos: int) -> int:
    """The index of the first ``/`` at or after ``pos`` not escaped by ``\\`` (or the end)."""
    while pos < len(text) and text[pos] != "/":
        pos += 2 if text[pos] == "\\" else 1
    return min(pos, len(text))


def _replacement(rule: str, text: str, pattern: re.Pattern[str]) -> tuple[_Piece, ...]:
    """Java's replacement syntax: ``\\x`` is x, ``$n`` group n (digits taken while the group
    exists), ``${name}`` a named group; ``$n`` past the last group is literal (Kafka)."""
    groups = pattern.groups
    pieces: list[_Piece] = []
    literal: list[str] = []

    def flush() -> None:
        if literal:
            pieces.append("".join(literal))
            literal.clear()

    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 == len(text):
                raise _rule_error(rule, "the replacement ends with a lone \\")
            literal.append(text[i + 1])
            i += 2
        elif c != "$":
            literal.append(c)
            i += 1
        elif i + 1 == len(text):
            raise _rule_error(rule, "the replacement ends with a lone $")
        elif text[i + 1] == "{":
            end = text.find("}", i + 2)
            name = text[i + 2 : end] if end > 0 else ""
            if name not in pattern.groupindex:
                raise _rule_error(rule, f"the pattern has no group named {name!r}")
            flush()
            pieces.append(_Group(name))
            i = end + 1
        elif text[i + 1] in "0123456789":
            ref = int(text[i + 1])
            if ref > groups:
                if groups == 0:
                    raise _rule_error(rule, f"${ref}: the pattern has no groups")
                literal.append("$")
                i += 1
                continue
            i += 2
            while i < len(text) and text[i] in "0123456789" and ref * 10 + int(text[i]) <= groups:
                ref = ref * 10 + int(text[i])
                i += 1
            flush()
            pieces.append(_Group(ref))
        else:
            raise _rule_error(rule, "$ must be followed by a group number or {name}")
    flush()
    return tuple(pieces)


def _parse_rule(rule: str) -> PrincipalMappingRule:
    """``RULE:pattern/replacement/`` with an optional ``L`` or ``U``; ``rule`` is complete."""
    body = rule[len("RULE:") :]
    end = _until_slash(body, 0)
    if end == len(body):
        raise _rule_error(rule, "expected RULE:pattern/replacement/")
    source = body[:end]
    replacement_end = _until_slash(body, end + 1)
    if replacement_end == len(body):
        raise _rule_error(rule, "expected RULE:pattern/replacement/ (the closing / is missing)")
    case = body[replacement_end + 1 :]
    if case not in ("", "L", "U"):
        raise _rule_error(rule, f"unexpected {case!r} after the last /: expected L, U or nothing")
    try:
        pattern = re.compile(_JAVA_NAMED_GROUP.sub("(?P<", source))
    except re.error as exc:
        raise _rule_error(rule, f"bad pattern: {exc}") from None
    replacement = _replacement(rule, body[end + 1 : replacement_end], pattern)
    return PrincipalMappingRule(rule, pattern, replacement, case)


def _split_rules(text: str) -> list[str]:
    """The rules of the list, in order: commas separate rules, but not inside a RULE's
    pattern or replacement (which end at their unescaped slashes)."""
    rules = []
    pos = 0
    while pos < len(text):
        while pos < len(text) and (text[pos].isspace() or text[pos] == ","):
            pos += 1  # empty entries are ignored, as in Kafka
        if pos == len(text):
            break
        start = pos
        if text.startswith("RULE:", pos):
            pos = _until_slash(text, pos + len("RULE:"))
            pos = _until_slash(text, pos + 1)
            pos = min(pos + 1, len(text))
        comma = text.find(",", pos)
        pos = len(text) if comma < 0 else comma
        rules.append(text[start:pos].strip())
    return rules


@functools.lru_cache(maxsize=32)
def _parse_cached(text: str) -> PrincipalMappingRules:
    if not text.strip():
        return DEFAULT_RULES
    rules = []
    for rule in _split_rules(text):
        if rule == "DEFAULT":
            rules.append(PrincipalMappingRule("DEFAULT"))
        elif rule.startswith("RULE:"):
            rules.append(_parse_rule(rule))
        else:
            raise _rule_error(rule, "expected DEFAULT or RULE:pattern/replacement/[L|U]")
    return PrincipalMappingRules(tuple(rules))


def parse_principal_mapping_rules(text: str) -> PrincipalMappingRules:
    """Parse ``ssl.principal.mapping.rules`` (the broker calls it at start-up to refuse a
    bad value); SecurityConfigError naming the key and the rule."""
    return _parse_cached(text)


def principal_from_certificate(
    der: bytes | None, rules: str | PrincipalMappingRules = "DEFAULT"
) -> KafkaPrincipal:
    """The principal a (verified) peer certificate proves: ANONYMOUS without one, else
    ``User:`` and the name ``rules`` give its subject DN. AuthenticationError when no rule
    applies or the certificate is unreadable."""
    if der is None:
        return ANONYMOUS
    mapping = rules if isinstance(rules, PrincipalMappingRules) else _parse_cached(rules)
    try:
        dn = subject_dn(der)
    except (ValueError, UnicodeDecodeError):
        raise AuthenticationError("the client certificate's subject is unreadable") from None
    name = mapping.name(dn)
    if name is None:
        raise AuthenticationError(f"no {PRINCIPAL_MAPPING_RULES_KEY} rule applies to {dn}")
    return KafkaPrincipal.user(name)


def peer_principal(
    ssl_object: ssl.SSLObject | ssl.SSLSocket, rules: str | PrincipalMappingRules = "DEFAULT"
) -> KafkaPrincipal:
    """``principal_from_certificate`` of a finished handshake's peer certificate."""
    return principal_from_certificate(ssl_object.getpeercert(binary_form=True), rules)
