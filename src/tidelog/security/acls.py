"""ACLs: Kafka's resource patterns, access control entries, filters and the ACL authorizer's
decision (``kafka.security.authorizer.AclAuthorizer``), pure: no IO, no clock.

Values (Kafka's ``org.apache.kafka.common.acl`` / ``.resource``; wire codes as Kafka's):

- ``ResourceType``, ``PatternType``, ``AclOperation``, ``AclPermissionType``: int enums with
  Kafka's codes. ``kafka_name`` is the spelling of Kafka's ZooKeeper JSON, paths and CLI
  (``Topic``, ``TransactionalId``, ``IdempotentWrite``, ``Allow``); ``from_name`` reads any
  of Kafka's spellings (``Topic``, ``TOPIC``, ``transactional_id``), UNKNOWN otherwise, and
  ``from_code`` maps an unknown code to UNKNOWN, as Kafka's ``fromCode`` does.
- ``ResourcePattern`` (type, name, pattern type), ``AccessControlEntry`` (principal string,
  host, operation, permission), ``AclBinding`` (pattern + entry), ``AclBindingFilter``.

Rules:

1. A filter matches as Kafka's ``ResourcePatternFilter``/``AccessControlEntryFilter``: ANY
   (type, pattern type, operation, permission) and None (name, principal, host) match
   everything; a pattern type of MATCH matches the patterns that would apply to the named
   resource: LITERAL of that name, LITERAL ``*`` and every PREFIXED prefix of the name.
   With a name and pattern type ANY or equal to the pattern's, names must be equal.
2. ``binding_error`` is what CreateAcls answers INVALID_REQUEST with (Kafka's messages, first
   failure wins): no UNKNOWN/ANY type, operation or permission; pattern LITERAL or PREFIXED
   only; a non-empty name; ``kafka-cluster`` as the only CLUSTER name; a principal
   ``<type>:<name>``. Tidelog adds one rule of its own: PREFIXED ``*`` is rejected (it
   would match only names starting with a ``*``: a LITERAL ``*`` was surely meant).
   ``filter_error`` rejects a filter with UNKNOWN elements (Describe/DeleteAcls).
3. ``AclAuthorizerCore.authorize`` decides exactly as Kafka's ``AclAuthorizer``:
   a. a super user (``super.users``, compared as ``Type:name``) is always allowed;
   b. the ACLs that apply to resource (type, name) are those of the LITERAL pattern of the
      name, the LITERAL ``*`` pattern and every PREFIXED pattern the name starts with;
   c. no ACL at all applies: ``allow.everyone.if.no.acl.found`` decides;
   d. a DENY whose principal is the caller's or ``User:*``, whose host is the caller's or
      ``*`` and whose operation is the requested one or ALL denies;
   e. otherwise an ALLOW matching in the same way allows, where DESCRIBE is also allowed by
      READ, WRITE, DELETE or ALTER, and DESCRIBE_CONFIGS by ALTER_CONFIGS (implication
      only ever helps ALLOW: a DENY of READ does not deny DESCRIBE);
   f. anything else is denied.
4. The core's ACL table maps a pattern to its entries; an empty set is never stored (a
   pattern without ACLs does not exist, as its znode does not).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Self

from tidelog.security.principal import KafkaPrincipal

#: The name of the single CLUSTER resource (Kafka's ``Resource.CLUSTER_NAME``).
CLUSTER_NAME: Final = "kafka-cluster"
#: A LITERAL resource name matching every resource of its type.
WILDCARD_RESOURCE: Final = "*"
#: The principal matching every user (Kafka's ``AclEntry.WILDCARD_PRINCIPAL_STRING``).
WILDCARD_PRINCIPAL: Final = "User:*"
#: The host matching every host (Kafka's ``AclEntry.WILDCARD_HOST``).
WILDCARD_HOST: Final = "*"


def _squash(text: str) -> str:
    return text.replace("_", "").replace("-", "").lower()


class _KafkaEnum(enum.IntEnum):
    """Shared behaviour of Kafka's ACL enums (each has an UNKNOWN = 0 member)."""

    @property
    def kafka_name(self) -> str:
        """Kafka's ``SecurityUtils`` spelling: ``IDEMPOTENT_WRITE`` -> ``IdempotentWrite``."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_code(cls, code: int) -> Self:
        try:
            return cls(int(code))
        except ValueError:
            return cls(0)

    @classmethod
    def from_name(cls, text: str) -> Self:
        """Any of Kafka's spellings, case-insensitively; UNKNOWN when none fits."""
        wanted = _squash(text)
        for member in cls:
            if _squash(member.name) == wanted:
                return member
        return cls(0)


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @property
    def is_specific(self) -> bool:
        """LITERAL or PREFIXED: a pattern a stored ACL can have."""
        return self in (PatternType.LITERAL, PatternType.PREFIXED)


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: Rule 3e: the operations whose ALLOW also allows the key.
IMPLIED_BY: Final[Mapping[AclOperation, frozenset[AclOperation]]] = {
    AclOperation.DESCRIBE: frozenset(
        {
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DELETE,
            AclOperation.ALTER,
        }
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset(
        {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    ),
}


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        """As Kafka's authorizer log writes it: ``Topic:LITERAL:orders``."""
        return f"{self.resource_type.kafka_name}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __str__(self) -> str:
        return (
            f"{self.principal} has {self.permission.kafka_name} permission for operations: "
            f"{self.operation.kafka_name} from hosts: {self.host}"
        )


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Rule 1. The defaults match every binding."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def of(cls, binding: AclBinding) -> AclBindingFilter:
        """The filter matching exactly ``binding``."""
        p, e = binding.pattern, binding.entry
        return cls(
            p.resource_type, p.name, p.pattern_type, e.principal, e.host, e.operation, e.permission
        )

    @property
    def is_unknown(self) -> bool:
        return (
            self.resource_type == ResourceType.UNKNOWN
            or self.pattern_type == PatternType.UNKNOWN
            or self.operation == AclOperation.UNKNOWN
            or self.permission == AclPermissionType.UNKNOWN
        )

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: the patterns that apply to the resource named ``self.name``.
        if pattern.pattern_type == PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD_RESOURCE)
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation not in (AclOperation.ANY, entry.operation):
            return False
        return self.permission in (AclPermissionType.ANY, entry.permission)

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)


MATCH_ALL: Final = AclBindingFilter()


def binding_error(binding: AclBinding) -> str | None:
    """Rule 2: why CreateAcls must refuse ``binding`` (Kafka's message), None when valid."""
    p, e = binding.pattern, binding.entry
    if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {p.resource_type.name}"
    if not p.pattern_type.is_specific:
        return f"Invalid patternType {p.pattern_type.name}"
    if e.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {e.operation.name}"
    if e.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {e.permission.name}"
    if not p.name:
        return "Invalid empty resource name"
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if p.pattern_type == PatternType.PREFIXED and p.name == WILDCARD_RESOURCE:
        return "Invalid resource name '*' for pattern type PREFIXED: use a LITERAL '*'"
    if ":" not in e.principal:
        return (
            f"Could not parse principal from `{e.principal}` (no colon is present separating "
            "the principal type from the principal name)"
        )
    try:
        KafkaPrincipal.parse(e.principal)
    except ValueError:
        return f"Could not parse principal from `{e.principal}`"
    return None


def filter_error(acl_filter: AclBindingFilter) -> str | None:
    """Why Describe/DeleteAcls must refuse ``acl_filter``, None when it is usable."""
    if acl_filter.is_unknown:
        return "Filter contains UNKNOWN elements"
    return None


def _entry_applies(
    entry: AccessControlEntry,
    principal: str,
    host: str,
    operations: frozenset[AclOperation],
    permission: AclPermissionType,
) -> bool:
    return (
        entry.permission == permission
        and entry.principal in (principal, WILDCARD_PRINCIPAL)
        and entry.host in (host, WILDCARD_HOST)
        and (entry.operation in operations or entry.operation == AclOperation.ALL)
    )


class AclAuthorizerCore:
    """The ACL table and the authorization decision (rules 3 and 4). Not thread-safe: one
    event loop owns it."""

    def __init__(
        self,
        acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]] | None = None,
        *,
        super_users: frozenset[str] = frozenset(),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        # Per resource type: LITERAL and PREFIXED names -> entries (rule 3b lookups).
        self._literal: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}
        self.replace_all(acls or {})

    # --- the table -----------------------------------------------------------------------

    @property
    def acls(self) -> Mapping[ResourcePattern, frozenset[AccessControlEntry]]:
        return self._acls

    def replace_all(self, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        self._acls.clear()
        self._literal.clear()
        self._prefixed.clear()
        for pattern, entries in acls.items():
            self.set_acls(pattern, entries)

    def set_acls(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """The ACLs of ``pattern`` are now ``entries`` (none: the pattern goes)."""
        frozen = frozenset(entries)
        if pattern.pattern_type == PatternType.LITERAL:
            index = self._literal.setdefault(pattern.resource_type, {})
        elif pattern.pattern_type == PatternType.PREFIXED:
            index = self._prefixed.setdefault(pattern.resource_type, {})
        else:
            raise ValueError(f"ACLs cannot be stored on a {pattern.pattern_type.name} pattern")
        if frozen:
            self._acls[pattern] = frozen
            index[pattern.name] = frozen
        else:
            self._acls.pop(pattern, None)
            index.pop(pattern.name, None)

    def get(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get(pattern, frozenset())

    def add(self, bindings: Iterable[AclBinding]) -> None:
        for binding in bindings:
            self.set_acls(binding.pattern, self.get(binding.pattern) | {binding.entry})

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        for binding in bindings:
            self.set_acls(binding.pattern, self.get(binding.pattern) - {binding.entry})

    def bindings(self, acl_filter: AclBindingFilter = MATCH_ALL) -> list[AclBinding]:
        """Every stored binding ``acl_filter`` matches, sorted."""
        return sorted(
            AclBinding(pattern, entry)
            for pattern, entries in self._acls.items()
            if acl_filter.matches_pattern(pattern)
            for entry in entries
            if acl_filter.matches_entry(entry)
        )

    # --- the decision --------------------------------------------------------------------

    def is_super_user(self, principal: KafkaPrincipal) -> bool:
        return str(principal) in self.super_users

    def matching_acls(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """Rule 3b: the entries of every pattern applying to resource (type, name)."""
        found: list[AccessControlEntry] = []
        literal = self._literal.get(resource_type)
        if literal:
            found.extend(literal.get(name, ()))
            if name != WILDCARD_RESOURCE:
                found.extend(literal.get(WILDCARD_RESOURCE, ()))
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            if len(prefixed) <= len(name):
                for prefix, entries in prefixed.items():
                    if name.startswith(prefix):
                        found.extend(entries)
            else:
                for end in range(len(name) + 1):
                    found.extend(prefixed.get(name[:end], ()))
        return found

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Rule 3."""
        if self.is_super_user(principal):
            return True
        acls = self.matching_acls(resource_type, name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        who = str(principal)
        denying = frozenset({operation})
        if any(_entry_applies(e, who, host, denying, AclPermissionType.DENY) for e in acls):
            return False
        allowing = IMPLIED_BY.get(operation, denying)
        return any(_entry_applies(e, who, host, allowing, AclPermissionType.ALLOW) for e in acls)
