"""Client quota admin requests on ``tidelog.client.Client``: DescribeClientQuotas (48) and
AlterClientQuotas (49), KIP-546, as Kafka's ``Admin.describeClientQuotas`` /
``alterClientQuotas`` send them.

Rules:

1. An entity is a list of ``(entity type, name)`` pairs, a None name being the default
   (``user`` / ``client-id``, Kafka's ``ClientQuotaEntity``).
2. Each function picks the highest version both sides speak; a broker advertising none
   raises ``NoCompatibleVersionError``. Any broker answers.
3. Broker errors come back as values, never raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from tidelog.client import wire
from tidelog.client.client import Client
from tidelog.client.errors import NoCompatibleVersionError
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey

_PREFERRED: Final = (1, 0)
#: Describe's match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

Entity = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: str
    #: None: remove the key.
    value: float | None


async def _version(client: Client, api_key: ApiKey) -> tuple[Any, int]:
    conn = await client.connection()
    version = conn.pick_version(api_key, _PREFERRED)
    if version is None:
        raise NoCompatibleVersionError(
            f"{conn.address} does not support {api_key.name} (API {int(api_key)})"
        )
    return conn, version


async def describe_client_quotas(
    client: Client,
    components: Sequence[tuple[str, int, str | None]],
    *,
    strict: bool = False,
) -> tuple[ErrorCode, str | None, list[tuple[Entity, dict[str, float]]]]:
    """``components``: ``(entity type, match type, name)``. The error, its message, and
    each matching entity with its quota values."""
    conn, version = await _version(client, ApiKey.DESCRIBE_CLIENT_QUOTAS)
    m = wire.schema_module(ApiKey.DESCRIBE_CLIENT_QUOTAS, version)
    response = await conn.send(
        m.DescribeClientQuotasRequest(
            components=tuple(
                m.ComponentData(entity_type=t, match_type=mt, match=name)
                for t, mt, name in components
            ),
            strict=strict,
        )
    )
    entries = [
        (
            tuple((str(e.entity_type), e.entity_name) for e in entry.entity),
            {str(v.key): float(v.value) for v in entry.values},
        )
        for entry in response.entries or ()
    ]
    return wire.error_code(response.error_code), response.error_message, entries


async def alter_client_quotas(
    client: Client,
    entity: Entity,
    ops: Sequence[QuotaOp],
    *,
    validate_only: bool = False,
) -> tuple[ErrorCode, str | None]:
    conn, version = await _version(client, ApiKey.ALTER_CLIENT_QUOTAS)
    m = wire.schema_module(ApiKey.ALTER_CLIENT_QUOTAS, version)
    response = await conn.send(
        m.AlterClientQuotasRequest(
            entries=(
                m.EntryData(
                    entity=tuple(
                        m.EntityData(entity_type=t, entity_name=name) for t, name in entity
                    ),
                    ops=tuple(
                        m.OpData(
                            key=op.key,
                            value=0.0 if op.value is None else float(op.value),
                            remove=op.value is None,
                        )
                        for op in ops
                    ),
                ),
            ),
            validate_only=validate_only,
        )
    )
    for entry in response.entries:
        return wire.error_code(entry.error_code), entry.error_message
    return ErrorCode.UNKNOWN_SERVER_ERROR, "empty AlterClientQuotas response"


__all__ = [
    "MATCH_ANY",
    "MATCH_DEFAULT",
    "MATCH_EXACT",
    "Entity",
    "QuotaOp",
    "alter_client_quotas",
    "describe_client_quotas",
]
