"""``tidelog configs describe|alter --entity-type users|clients``: client quotas (KIP-546), as
``kafka-configs.sh`` does them.

- An entity is one ``--entity-type`` followed by ``--entity-name N`` or ``--entity-default``,
  or two for a (user, client-id) pair, in kafka-configs.sh's order:
  ``--entity-type users --entity-name alice --entity-type clients --entity-name app``.
- ``alter ... --add-config producer_byte_rate=1024,request_percentage=200
  --delete-config consumer_byte_rate``: AlterClientQuotas; prints kafka-configs.sh's
  "Completed updating config for user alice." (or "... default config for users in the
  cluster.").
- ``describe ...``: DescribeClientQuotas with the entity as a strict filter (a type without
  a name matches any name, kafka-configs.sh's ``containsOnly``); prints
  "Quota configs for user-principal 'alice', client-id 'app' are producer_byte_rate=1024.0".

Rules:

1. Values must be numbers: a key with one that is not is a usage error (exit 2, nothing
   sent). Unknown keys are the broker's to refuse (INVALID_REQUEST, exit 1).
2. A refusal prints Kafka's error code and message and exits 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from tidelog.cli.output import UsageError, kafka_error, print_json
from tidelog.client import BlockingClient
from tidelog.client import quota_admin as qa
from tidelog.errors import ErrorCode

#: kafka-configs.sh's entity types -> the protocol's.
QUOTA_ENTITY_TYPES = {"users": "user", "clients": "client-id"}

#: One ``(entity type, name or None for the default or no name)`` per --entity-type given,
#: with whether --entity-default was given.
Spec = list[tuple[str, str | None, bool]]


def quota_ops(added: dict[str, str], deleted: Sequence[str]) -> list[qa.QuotaOp]:
    """Rule 1."""
    ops = []
    for key, text in added.items():
        try:
            value = float(text)
        except ValueError:
            raise UsageError(f"{key}: {text!r} is not a number") from None
        ops.append(qa.QuotaOp(key, value))
    return ops + [qa.QuotaOp(key, None) for key in deleted]


def entity_text(entity: qa.Entity) -> str:
    """kafka-configs.sh's words for an entity."""
    parts = []
    for kind, name in entity:
        what = "user-principal" if kind == "user" else "client-id"
        parts.append(f"the default {what}" if name is None else f"{what} '{name}'")
    return ", ".join(parts)


def _java_double(value: float) -> str:
    return repr(float(value))


def check_alter_spec(spec: Spec) -> None:
    """Before anything is sent: an alteration names each entity or its default."""
    if any(name is None and not default for _k, name, default in spec):
        raise UsageError("alter needs --entity-name NAME or --entity-default for each type")


def alter(client: BlockingClient, spec: Spec, ops: Sequence[qa.QuotaOp], *, json: bool) -> int:
    entity = tuple((QUOTA_ENTITY_TYPES[t], name) for t, name, _d in spec)
    error, message = client.run(qa.alter_client_quotas(client.client, entity, ops))
    if error != ErrorCode.NONE:
        raise kafka_error(error, message, entity_text(entity))
    if json:
        print_json(
            {
                "entity": [{"type": t, "name": n} for t, n in entity],
                "set": {o.key: o.value for o in ops if o.value is not None},
                "deleted": [o.key for o in ops if o.value is None],
            }
        )
        return 0
    kind, name, _default = spec[0]
    if name is None:
        print(f"Completed updating default config for {kind} in the cluster.")
    else:
        print(f"Completed updating config for {kind[:-1]} {name}.")
    return 0


def describe(client: BlockingClient, spec: Spec, *, json: bool) -> int:
    components: list[tuple[str, int, str | None]] = []
    for kind, name, default in spec:
        if default:
            components.append((QUOTA_ENTITY_TYPES[kind], qa.MATCH_DEFAULT, None))
        elif name is None:
            components.append((QUOTA_ENTITY_TYPES[kind], qa.MATCH_ANY, None))
        else:
            components.append((QUOTA_ENTITY_TYPES[kind], qa.MATCH_EXACT, name))
    error, message, entries = client.run(
        qa.describe_client_quotas(client.client, components, strict=True)
    )
    if error != ErrorCode.NONE:
        raise kafka_error(error, message, "describing client quotas")
    if json:
        print_json(
            [
                {"entity": [{"type": t, "name": n} for t, n in entity], "configs": values}
                for entity, values in entries
            ]
        )
        return 0
    for entity, values in entries:
        listed = ", ".join(f"{k}={_java_double(v)}" for k, v in sorted(values.items()))
        print(f"Quota configs for {entity_text(entity)} are {listed}")
    return 0


def entity_spec(pairs: Sequence[tuple[str, str | None]]) -> Spec:
    """The ordered ``--entity-type`` / ``--entity-name`` / ``--entity-default`` flags as
    entities (kafka-configs.sh pairs each name or default with the type before it)."""
    spec: Spec = []
    for flag, value in pairs:
        if flag == "type":
            assert value is not None
            spec.append((value, None, False))
            continue
        if not spec or spec[-1][1] is not None or spec[-1][2]:
            raise UsageError(f"--entity-{flag} must follow an --entity-type")
        kind = spec[-1][0]
        spec[-1] = (kind, value, False) if flag == "name" else (kind, None, True)
    kinds = [k for k, _n, _d in spec]
    if len(kinds) != len(set(kinds)):
        raise UsageError("each --entity-type may be given once")
    if len(spec) > 1 and sorted(kinds) != ["clients", "users"]:
        raise UsageError("two entity types must be users and clients")
    if len(spec) > 1 and kinds[0] != "users":
        spec.reverse()
    return spec


class EntityFlag(argparse.Action):
    """Keeps ``--entity-type``, ``--entity-name`` and ``--entity-default`` in the order
    given (``namespace.entity_flags``) as well as in their own attributes."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        flags: list[tuple[str, str | None]] = list(getattr(namespace, "entity_flags", None) or [])
        flag = self.dest.removeprefix("entity_")
        value = None if self.nargs == 0 else str(values)
        flags.append((flag, value))
        namespace.entity_flags = flags
        setattr(namespace, self.dest, True if self.nargs == 0 else value)


__all__ = [
    "QUOTA_ENTITY_TYPES",
    "EntityFlag",
    "alter",
    "check_alter_spec",
    "describe",
    "entity_spec",
    "entity_text",
    "quota_ops",
]
