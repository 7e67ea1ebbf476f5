"""Config admin requests on ``tidelog.client.Client``: DescribeConfigs (32, with synonyms and
documentation), IncrementalAlterConfigs (44, KIP-339) and ListConfigResources (74,
KIP-1142), as Kafka's ``Admin.describeConfigs``/``incrementalAlterConfigs``/
``listConfigResources`` send them.

Rules:

1. Each function picks the highest version both sides speak (``_PREFERRED``); a broker
   advertising none raises ``NoCompatibleVersionError``.
2. A broker resource named by an id goes to that broker (it answers for itself only,
   KIP-226); topics and the cluster-wide default (name "") go to any broker.
3. Broker errors come back as values, never raised; an error code the client does not
   know reads as UNKNOWN_SERVER_ERROR.
4. Requests are built and responses read by pure functions (``*_request``, ``read_*``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from tidelog.client import wire
from tidelog.client.client import Client
from tidelog.client.connection import BrokerConnection
from tidelog.client.errors import NoCompatibleVersionError
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey

_PREFERRED: Final = {
    ApiKey.DESCRIBE_CONFIGS: (4, 3, 2, 1),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (1, 0),
    ApiKey.LIST_CONFIG_RESOURCES: (1,),
}

#: Kafka's ConfigResource.Type.
TOPIC: Final = 2
BROKER: Final = 4
#: IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType).
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

SOURCES: Final = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}
TYPES: Final = {
    0: "UNKNOWN",
    1: "BOOLEAN",
    2: "STRING",
    3: "INT",
    4: "SHORT",
    5: "LONG",
    6: "DOUBLE",
    7: "LIST",
    8: "CLASS",
    9: "PASSWORD",
}


def _pick(conn: BrokerConnection, api_key: ApiKey) -> int:
    version = conn.pick_version(api_key, _PREFERRED[api_key])
    if version is None:
        raise NoCompatibleVersionError(
            f"{conn.address} does not support {api_key.name} (API {int(api_key)})"
        )
    return version


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: str


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    #: None: sensitive, or Kafka's null.
    value: str | None
    source: str
    read_only: bool
    sensitive: bool
    type: str = "UNKNOWN"
    documentation: str | None = None
    synonyms: tuple[ConfigSynonym, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceConfigs:
    resource_type: int
    resource_name: str
    error_code: ErrorCode
    error_message: str | None
    entries: tuple[ConfigEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class AlterOp:
    """One IncrementalAlterConfigs operation (``value`` None for DELETE)."""

    name: str
    op: int
    value: str | None = None


# --- pure: requests and answers ------------------------------------------------------------


def describe_configs_request(
    resources: Sequence[tuple[int, str]],
    *,
    synonyms: bool = True,
    documentation: bool = False,
    version: int = 4,
) -> Any:
    m = wire.schema_module(ApiKey.DESCRIBE_CONFIGS, version)
    fields: dict[str, Any] = {
        "resources": tuple(
            m.DescribeConfigsResource(
                resource_type=rtype, resource_name=name, configuration_keys=None
            )
            for rtype, name in resources
        ),
        "include_synonyms": synonyms,
    }
    if version >= 3:
        fields["include_documentation"] = documentation
    return m.DescribeConfigsRequest(**fields)


def read_describe_configs(response: Any) -> list[ResourceConfigs]:
    out = []
    for r in response.results:
        entries = tuple(
            ConfigEntry(
                name=c.name,
                value=c.value,
                source=SOURCES.get(int(getattr(c, "config_source", 0)), "UNKNOWN"),
                read_only=bool(c.read_only),
                sensitive=bool(c.is_sensitive),
                type=TYPES.get(int(getattr(c, "config_type", 0)), "UNKNOWN"),
                documentation=getattr(c, "documentation", None),
                synonyms=tuple(
                    ConfigSynonym(s.name, s.value, SOURCES.get(int(s.source), "UNKNOWN"))
                    for s in getattr(c, "synonyms", ())
                ),
            )
            for c in r.configs
        )
        out.append(
            ResourceConfigs(
                int(r.resource_type),
                str(r.resource_name),
                wire.error_code(r.error_code),
                r.error_message,
                entries,
            )
        )
    return out


def incremental_alter_request(
    resource_type: int,
    name: str,
    ops: Sequence[AlterOp],
    *,
    validate_only: bool = False,
    version: int = 1,
) -> Any:
    m = wire.schema_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, version)
    return m.IncrementalAlterConfigsRequest(
        resources=(
            m.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=name,
                configs=tuple(
                    m.AlterableConfig(name=o.name, config_operation=o.op, value=o.value)
                    for o in ops
                ),
            ),
        ),
        validate_only=validate_only,
    )


def _node_of(resource_type: int, name: str) -> int | None:
    """Rule 2."""
    if resource_type == BROKER and name:
        try:
            return int(name)
        except ValueError:
            return None
    return None


# --- requests ------------------------------------------------------------------------------


async def describe_configs(
    client: Client,
    resources: Sequence[tuple[int, str]],
    *,
    synonyms: bool = True,
    documentation: bool = False,
) -> list[ResourceConfigs]:
    """One DescribeConfigs per broker asked (rule 2), results in the order asked."""
    results: dict[tuple[int, str], ResourceConfigs] = {}
    by_node: dict[int | None, list[tuple[int, str]]] = {}
    for resource in resources:
        by_node.setdefault(_node_of(*resource), []).append(resource)
    for node, group in by_node.items():
        conn = await client.connection(node)
        version = _pick(conn, ApiKey.DESCRIBE_CONFIGS)
        response = await conn.send(
            describe_configs_request(
                group, synonyms=synonyms, documentation=documentation, version=version
            )
        )
        for result in read_describe_configs(response):
            results[(result.resource_type, result.resource_name)] = result
    return [
        results.get(r, ResourceConfigs(r[0], r[1], ErrorCode.UNKNOWN_SERVER_ERROR, "no answer"))
        for r in resources
    ]


async def incremental_alter_configs(
    client: Client,
    resource_type: int,
    name: str,
    ops: Sequence[AlterOp],
    *,
    validate_only: bool = False,
) -> tuple[ErrorCode, str | None]:
    conn = await client.connection(_node_of(resource_type, name))
    version = _pick(conn, ApiKey.INCREMENTAL_ALTER_CONFIGS)
    response = await conn.send(
        incremental_alter_request(
            resource_type, name, ops, validate_only=validate_only, version=version
        )
    )
    for r in response.responses:
        return wire.error_code(r.error_code), r.error_message
    return ErrorCode.UNKNOWN_SERVER_ERROR, "empty IncrementalAlterConfigs response"


async def list_config_resources(
    client: Client, resource_types: Sequence[int] = ()
) -> tuple[ErrorCode, list[tuple[int, str]]]:
    """KIP-1142: ``(type, name)`` of every resource with configs (every type when none)."""
    conn = await client.connection()
    version = _pick(conn, ApiKey.LIST_CONFIG_RESOURCES)
    m = wire.schema_module(ApiKey.LIST_CONFIG_RESOURCES, version)
    response = await conn.send(m.ListConfigResourcesRequest(resource_types=tuple(resource_types)))
    return wire.error_code(response.error_code), [
        (int(r.resource_type), str(r.resource_name)) for r in response.config_resources
    ]


__all__ = [
    "APPEND",
    "BROKER",
    "DELETE",
    "SET",
    "SUBTRACT",
    "TOPIC",
    "AlterOp",
    "ConfigEntry",
    "ConfigSynonym",
    "ResourceConfigs",
    "describe_configs",
    "describe_configs_request",
    "incremental_alter_configs",
    "incremental_alter_request",
    "list_config_resources",
    "read_describe_configs",
]
