"""Security admin requests on ``tidelog.client.Client``: ACLs and SCRAM users.

CreateAcls (30), DescribeAcls (29) and DeleteAcls (31) as Kafka's ``Admin.createAcls``/
``describeAcls``/``deleteAcls`` send them (KIP-140, prefixed patterns KIP-290), and
DescribeUserScramCredentials (50) / AlterUserScramCredentials (51) as
``Admin.describeUserScramCredentials``/``alterUserScramCredentials`` do (KIP-554).

Rules:

1. Each function picks the highest version both sides speak from this module's table
   (``_PREFERRED``): ACL APIs v3 to v1 (v0 has no pattern type), the SCRAM APIs v0. A broker
   advertising none of them raises ``NoCompatibleVersionError``.
2. Requests go to any broker unless ``node_id`` names one (Kafka's least-loaded node; a
   ZooKeeper-mode broker stores ACLs and credentials itself).
3. Broker errors come back as values, never raised: per ACL creation, per delete filter and
   per deleted ACL, the DescribeAcls and DescribeUserScramCredentials top-level error, and
   per user. Enum codes the client does not know read as UNKNOWN (as Kafka's
   ``fromCode``); an error code it does not know reads as UNKNOWN_SERVER_ERROR.
4. No password travels: for each upsertion the client draws a salt
   (``tidelog.security.scram.new_salt``) unless one is given and sends ``SaltedPassword =
   Hi(password, salt, iterations)`` (Kafka's ``ScramFormatter.saltedPassword``); the broker
   derives StoredKey and ServerKey. ``ScramUpsertion``'s repr hides the password and salt,
   and nothing here logs.
5. Requests are built and responses read by pure functions (``*_request``, ``read_*``), so
   both are testable without a broker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tidelog.client import wire
from tidelog.client.client import Client
from tidelog.client.connection import BrokerConnection
from tidelog.client.errors import NoCompatibleVersionError
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.security.acls import (
    MATCH_ALL,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tidelog.security.scram import (
    DEFAULT_ITERATIONS,
    ScramMechanism,
    new_salt,
    salted_password,
)

#: Rule 1: versions each function speaks, best first.
_PREFERRED: Final[Mapping[ApiKey, tuple[int, ...]]] = {
    ApiKey.CREATE_ACLS: (3, 2, 1),
    ApiKey.DESCRIBE_ACLS: (3, 2, 1),
    ApiKey.DELETE_ACLS: (3, 2, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0,),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0,),
}


def pick_version(conn: BrokerConnection, api_key: ApiKey) -> int:
    """Rule 1: the highest version of ``api_key`` both sides speak."""
    version = conn.pick_version(api_key, _PREFERRED[api_key])
    if version is None:
        raise NoCompatibleVersionError(
            f"{conn.address} does not support {api_key.name} (API {int(api_key)}); this "
            f"client speaks versions {sorted(_PREFERRED[api_key])}"
        )
    return version


# --- results -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AclCreationResult:
    """CreateAcls' answer for one binding, in the order they were sent."""

    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribeAclsResult:
    error_code: ErrorCode
    error_message: str | None
    #: The matching bindings, sorted (empty when ``error_code`` is not NONE).
    bindings: tuple[AclBinding, ...] = ()


@dataclass(frozen=True, slots=True)
class DeletedAcl:
    """One binding a DeleteAcls filter matched; ``error_code`` NONE when it is gone."""

    binding: AclBinding
    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteAclsResult:
    """DeleteAcls' answer for one filter, in the order they were sent."""

    error_code: ErrorCode
    error_message: str | None
    matching: tuple[DeletedAcl, ...] = ()


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    """One credential of a user: the mechanism (None: a type this client does not know)
    and its iteration count; never anything secret (the broker sends nothing more)."""

    mechanism: ScramMechanism | None
    iterations: int
    mechanism_type: int = 0

    @property
    def mechanism_name(self) -> str:
        return self.mechanism.mechanism_name if self.mechanism else "UNKNOWN"


@dataclass(frozen=True, slots=True)
class UserScramCredentials:
    user: str
    error_code: ErrorCode
    error_message: str | None
    credentials: tuple[ScramCredentialInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeScramResult:
    #: The message-level error (CLUSTER_AUTHORIZATION_FAILED, ...); users then is empty.
    error_code: ErrorCode
    error_message: str | None
    users: tuple[UserScramCredentials, ...] = ()


@dataclass(frozen=True, slots=True)
class ScramAlterResult:
    """AlterUserScramCredentials' answer for one user."""

    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """Set ``user``'s credential for ``mechanism`` (Kafka's ``UserScramCredentialUpsertion``).
    The password and the salt are never in the repr (rule 4)."""

    user: str
    mechanism: ScramMechanism
    password: str = field(repr=False)
    iterations: int = DEFAULT_ITERATIONS
    #: None: a fresh random salt when the request is built.
    salt: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    """Remove ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: ScramMechanism


# --- pure: requests ----------------------------------------------------------------------


def create_acls_request(bindings: Sequence[AclBinding], version: int = 3) -> Any:
    m = wire.schema_module(ApiKey.CREATE_ACLS, version)
    return m.CreateAclsRequest(
        creations=tuple(
            m.AclCreation(
                resource_type=int(b.pattern.resource_type),
                resource_name=b.pattern.name,
                resource_pattern_type=int(b.pattern.pattern_type),
                principal=b.entry.principal,
                host=b.entry.host,
                operation=int(b.entry.operation),
                permission_type=int(b.entry.permission),
            )
            for b in bindings
        )
    )


def _filter_fields(acl_filter: AclBindingFilter) -> dict[str, Any]:
    return {
        "resource_type_filter": int(acl_filter.resource_type),
        "resource_name_filter": acl_filter.name,
        "pattern_type_filter": int(acl_filter.pattern_type),
        "principal_filter": acl_filter.principal,
        "host_filter": acl_filter.host,
        "operation": int(acl_filter.operation),
        "permission_type": int(acl_filter.permission),
    }


def describe_acls_request(acl_filter: AclBindingFilter, version: int = 3) -> Any:
    m = wire.schema_module(ApiKey.DESCRIBE_ACLS, version)
    return m.DescribeAclsRequest(**_filter_fields(acl_filter))


def delete_acls_request(filters: Sequence[AclBindingFilter], version: int = 3) -> Any:
    m = wire.schema_module(ApiKey.DELETE_ACLS, version)
    return m.DeleteAclsRequest(
        filters=tuple(m.DeleteAclsFilter(**_filter_fields(f)) for f in filters)
    )


def describe_scram_request(users: Sequence[str] | None, version: int = 0) -> Any:
    """None (or no names): every user with a credential."""
    m = wire.schema_module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, version)
    names = None if not users else tuple(m.UserName(name=u) for u in users)
    return m.DescribeUserScramCredentialsRequest(users=names)


def alter_scram_request(
    upsertions: Sequence[ScramUpsertion], deletions: Sequence[ScramDeletion], version: int = 0
) -> Any:
    """Rule 4: each upsertion carries a salt and the salted password, never the password."""
    m = wire.schema_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, version)
    upserts = []
    for u in upsertions:
        salt = u.salt if u.salt is not None else new_salt()
        upserts.append(
            m.ScramCredentialUpsertion(
                name=u.user,
                mechanism=u.mechanism.type_id,
                iterations=u.iterations,
                salt=salt,
                salted_password=salted_password(u.mechanism, u.password, salt, u.iterations),
            )
        )
    return m.AlterUserScramCredentialsRequest(
        deletions=tuple(
            m.ScramCredentialDeletion(name=d.user, mechanism=d.mechanism.type_id) for d in deletions
        ),
        upsertions=tuple(upserts),
    )


# --- pure: responses ---------------------------------------------------------------------


def _binding(resource: Any, acl: Any) -> AclBinding:
    """A binding from a response's resource fields (``resource_type``, ``resource_name``,
    ``pattern_type``) and ACL fields (``principal``, ``host``, ``operation``,
    ``permission_type``); one object may carry both (DeleteAcls)."""
    return AclBinding(
        ResourcePattern(
            ResourceType.from_code(resource.resource_type),
            str(resource.resource_name),
            PatternType.from_code(getattr(resource, "pattern_type", int(PatternType.LITERAL))),
        ),
        AccessControlEntry(
            str(acl.principal),
            str(acl.host),
            AclOperation.from_code(acl.operation),
            AclPermissionType.from_code(acl.permission_type),
        ),
    )


def read_create_acls(response: Any) -> list[AclCreationResult]:
    return [
        AclCreationResult(wire.error_code(r.error_code), r.error_message) for r in response.results
    ]


def read_describe_acls(response: Any) -> DescribeAclsResult:
    bindings = sorted(_binding(r, a) for r in response.resources for a in r.acls)
    return DescribeAclsResult(
        wire.error_code(response.error_code), response.error_message, tuple(bindings)
    )


def read_delete_acls(response: Any) -> list[DeleteAclsResult]:
    return [
        DeleteAclsResult(
            wire.error_code(f.error_code),
            f.error_message,
            tuple(
                DeletedAcl(_binding(a, a), wire.error_code(a.error_code), a.error_message)
                for a in f.matching_acls
            ),
        )
        for f in response.filter_results
    ]


def read_describe_scram(response: Any) -> DescribeScramResult:
    users = tuple(
        UserScramCredentials(
            user=str(r.user),
            error_code=wire.error_code(r.error_code),
            error_message=r.error_message,
            credentials=tuple(
                ScramCredentialInfo(
                    ScramMechanism.from_type(int(c.mechanism)),
                    int(c.iterations),
                    int(c.mechanism),
                )
                for c in r.credential_infos
            ),
        )
        for r in response.results
    )
    return DescribeScramResult(wire.error_code(response.error_code), response.error_message, users)


def read_alter_scram(response: Any) -> dict[str, ScramAlterResult]:
    return {
        str(r.user): ScramAlterResult(wire.error_code(r.error_code), r.error_message)
        for r in response.results
    }


# --- the calls ---------------------------------------------------------------------------


async def create_acls(
    client: Client, bindings: Sequence[AclBinding], *, node_id: int | None = None
) -> list[AclCreationResult]:
    """CreateAcls: one result per binding, in order (rule 3)."""
    if not bindings:
        return []
    conn = await client.connection(node_id)
    version = pick_version(conn, ApiKey.CREATE_ACLS)
    return read_create_acls(await conn.send(create_acls_request(bindings, version)))


async def describe_acls(
    client: Client, acl_filter: AclBindingFilter = MATCH_ALL, *, node_id: int | None = None
) -> DescribeAclsResult:
    """DescribeAcls: the bindings ``acl_filter`` matches (every one by default)."""
    conn = await client.connection(node_id)
    version = pick_version(conn, ApiKey.DESCRIBE_ACLS)
    return read_describe_acls(await conn.send(describe_acls_request(acl_filter, version)))


async def delete_acls(
    client: Client, filters: Sequence[AclBindingFilter], *, node_id: int | None = None
) -> list[DeleteAclsResult]:
    """DeleteAcls: one result per filter, in order, each listing the bindings it removed."""
    if not filters:
        return []
    conn = await client.connection(node_id)
    version = pick_version(conn, ApiKey.DELETE_ACLS)
    return read_delete_acls(await conn.send(delete_acls_request(filters, version)))


async def describe_user_scram_credentials(
    client: Client, users: Sequence[str] | None = None, *, node_id: int | None = None
) -> DescribeScramResult:
    """DescribeUserScramCredentials for ``users`` (None: every user with a credential).
    An unknown user's result is RESOURCE_NOT_FOUND."""
    conn = await client.connection(node_id)
    version = pick_version(conn, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
    return read_describe_scram(await conn.send(describe_scram_request(users, version)))


async def alter_user_scram_credentials(
    client: Client,
    upsertions: Sequence[ScramUpsertion] = (),
    deletions: Sequence[ScramDeletion] = (),
    *,
    node_id: int | None = None,
) -> dict[str, ScramAlterResult]:
    """AlterUserScramCredentials: user -> its result (rule 4 for the passwords)."""
    if not upsertions and not deletions:
        return {}
    conn = await client.connection(node_id)
    version = pick_version(conn, ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
    return read_alter_scram(await conn.send(alter_scram_request(upsertions, deletions, version)))
