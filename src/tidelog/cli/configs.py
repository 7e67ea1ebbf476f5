"""``tidelog configs describe|alter``: topic and broker configs, like ``kafka-configs.sh``
(client quotas, ``--entity-type users|clients``: ``tidelog.cli.client_quotas``).

- ``describe --entity-type topics|brokers [--entity-name N | --entity-default] [--all]``:
  without ``--all`` only the entity's own runtime configs (a topic's overrides, a broker's
  DYNAMIC_BROKER_CONFIG entries, the default's), with it every config; each line is
  ``name=value sensitive=... synonyms={...}`` as kafka-configs.sh prints it. Without a
  name: every topic, or every broker.
- ``alter --entity-type topics|brokers (--entity-name N | --entity-default)
  [--add-config k=v,k2=[a,b]] [--delete-config k,...]``: IncrementalAlterConfigs SET and
  DELETE (KIP-339). ``--entity-default`` is the brokers' cluster-wide default
  (``/config/brokers/<default>``, KIP-226); topics have none.

Rules:

1. ``--add-config`` is kafka-configs.sh's list: commas separate entries except inside
   ``[...]``, which holds a list value (``k=[a,b]`` sets ``k`` to ``a,b``); each entry is
   ``key=value``. A malformed entry, a key both added and deleted, or a missing
   ``--add-config``/``--delete-config`` is a usage error (exit 2, nothing sent).
2. A broker named by id is asked directly (it answers for itself only); topics and the
   default go to any broker. A refusal prints Kafka's error code and message and exits 1.
3. Sensitive values are never shown (the broker sends null; printed as ``null``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from tidelog.cli import client_quotas
from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    UsageError,
    add_bootstrap_flags,
    add_json_flag,
    kafka_error,
    print_json,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.client import BlockingClient
from tidelog.client import config_admin as ca
from tidelog.errors import ErrorCode

ENTITY_TYPES = {"topics": ca.TOPIC, "brokers": ca.BROKER}
ALL_ENTITY_TYPES = sorted([*ENTITY_TYPES, *client_quotas.QUOTA_ENTITY_TYPES])


# --- rule 1: the --add-config list --------------------------------------------------------


def split_config_list(text: str) -> list[str]:
    """Split on commas outside ``[...]``."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(0, depth - 1)
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    items.append("".join(current))
    return [item.strip() for item in items if item.strip()]


def parse_add_config(text: str) -> dict[str, str]:
    """``k=v,k2=[a,b]`` -> ``{"k": "v", "k2": "a,b"}`` (rule 1)."""
    out: dict[str, str] = {}
    for item in split_config_list(text):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise UsageError(
                f"--add-config: {item!r} is not KEY=VALUE",
                hint="e.g. --add-config retention.ms=60000,cleanup.policy=[delete]",
            )
        if value.startswith("[") and value.endswith("]"):
            value = ",".join(v.strip() for v in value[1:-1].split(","))
        out[key] = value
    return out


def parse_delete_config(text: str) -> list[str]:
    return [k.strip() for k in text.split(",") if k.strip()]


# --- output ---------------------------------------------------------------------------------


def _value(value: str | None) -> str:
    return "null" if value is None else value


def format_entry(entry: ca.ConfigEntry) -> str:
    """kafka-configs.sh's line for one config."""
    synonyms = ", ".join(f"{s.source}:{s.name}={_value(s.value)}" for s in entry.synonyms)
    sensitive = "true" if entry.sensitive else "false"
    return f"  {entry.name}={_value(entry.value)} sensitive={sensitive} synonyms={{{synonyms}}}"


def heading(resource: ca.ResourceConfigs, all_configs: bool) -> str:
    kind = "All" if all_configs else "Dynamic"
    if resource.resource_type == ca.BROKER:
        if not resource.resource_name:
            return "Default configs for brokers in the cluster are:"
        return f"{kind} configs for broker {resource.resource_name} are:"
    return f"{kind} configs for topic {resource.resource_name} are:"


def shown(resource: ca.ResourceConfigs, all_configs: bool) -> list[ca.ConfigEntry]:
    """kafka-configs.sh's filter: without ``--all`` only the entity's own runtime configs
    (a topic's overrides, a broker's DYNAMIC_BROKER_CONFIG, the default's entries)."""
    if all_configs:
        return list(resource.entries)
    if resource.resource_type == ca.TOPIC:
        wanted = "DYNAMIC_TOPIC_CONFIG"
    elif resource.resource_name:
        wanted = "DYNAMIC_BROKER_CONFIG"
    else:
        wanted = "DYNAMIC_DEFAULT_BROKER_CONFIG"
    return [e for e in resource.entries if e.source == wanted]


def entry_json(entry: ca.ConfigEntry) -> dict[str, Any]:
    return {
        "name": entry.name,
        "value": entry.value,
        "source": entry.source,
        "type": entry.type,
        "sensitive": entry.sensitive,
        "read_only": entry.read_only,
        "synonyms": [
            {"name": s.name, "value": s.value, "source": s.source} for s in entry.synonyms
        ],
    }


# --- commands ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_bootstrap_flags(p)
        add_json_flag(p)
        flag = client_quotas.EntityFlag
        p.add_argument(
            "--entity-type",
            required=True,
            choices=ALL_ENTITY_TYPES,
            action=flag,
            help="users and clients may be given both (a user's client-id)",
        )
        p.add_argument(
            "--entity-name",
            metavar="NAME",
            action=flag,
            help="a topic, a broker id, a user or a client-id",
        )
        p.add_argument(
            "--entity-default",
            action=flag,
            nargs=0,
            default=False,
            help="the brokers' cluster-wide default (/config/brokers/<default>), or the "
            "default user or client-id",
        )
        return p

    p = add("describe", "show configs, with their sources and synonyms (DescribeConfigs)")
    p.add_argument("--all", action="store_true", help="every config, not only those set")
    p = add("alter", "set or delete configs (IncrementalAlterConfigs)")
    p.add_argument("--add-config", metavar="K=V[,K2=[A,B]]", help="configs to set")
    p.add_argument("--delete-config", metavar="K[,K2]", help="configs to delete")


def _entity(args: argparse.Namespace) -> str | None:
    """The resource name: "" for the default, None for every entity (describe only)."""
    if len(args.entity_flags) > 2:
        raise UsageError("one --entity-type with one --entity-name or --entity-default")
    if args.entity_default and args.entity_name is not None:
        raise UsageError("--entity-name and --entity-default exclude each other")
    if args.entity_default:
        if args.entity_type != "brokers":
            raise UsageError("--entity-default applies to --entity-type brokers only")
        return ""
    name: str | None = args.entity_name
    return name


def run(args: argparse.Namespace) -> int:
    spec = client_quotas.entity_spec(args.entity_flags)
    if spec[0][0] in client_quotas.QUOTA_ENTITY_TYPES:
        return _run_quotas(args, spec)
    entity = _entity(args)
    if args.action == "alter":
        ops = alter_ops(args, entity)
    bootstrap = resolve_bootstrap(args)
    security = resolve_security(args)
    with BlockingClient(bootstrap, client_id="tidelog-cli", security=security) as client:
        if args.action == "alter":
            assert entity is not None
            return _alter(client, args, entity, ops)
        return _describe(client, args, entity)


def _run_quotas(args: argparse.Namespace, spec: client_quotas.Spec) -> int:
    """Users and clients: client quotas (``tidelog.cli.client_quotas``)."""
    if args.action == "alter":
        client_quotas.check_alter_spec(spec)
        ops = client_quotas.quota_ops(*_changes(args))
    bootstrap = resolve_bootstrap(args)
    security = resolve_security(args)
    with BlockingClient(bootstrap, client_id="tidelog-cli", security=security) as client:
        if args.action == "alter":
            return client_quotas.alter(client, spec, ops, json=args.json)
        return client_quotas.describe(client, spec, json=args.json)


def _changes(args: argparse.Namespace) -> tuple[dict[str, str], list[str]]:
    """``--add-config`` and ``--delete-config`` of an alter: at least one, no key in both."""
    if not args.add_config and not args.delete_config:
        raise UsageError("alter needs --add-config and/or --delete-config")
    added = parse_add_config(args.add_config or "")
    deleted = parse_delete_config(args.delete_config or "")
    both = sorted(set(added) & set(deleted))
    if both:
        raise UsageError(f"{', '.join(both)} both added and deleted")
    return added, deleted


def alter_ops(args: argparse.Namespace, entity: str | None) -> list[ca.AlterOp]:
    """Rule 1, before anything is sent."""
    if entity is None:
        raise UsageError("alter needs --entity-name NAME or --entity-default")
    added, deleted = _changes(args)
    return [ca.AlterOp(k, ca.SET, v) for k, v in added.items()] + [
        ca.AlterOp(k, ca.DELETE) for k in deleted
    ]


def _alter(
    client: BlockingClient, args: argparse.Namespace, entity: str, ops: Sequence[ca.AlterOp]
) -> int:
    rtype = ENTITY_TYPES[args.entity_type]
    error, message = client.run(ca.incremental_alter_configs(client.client, rtype, entity, ops))
    what = _what(rtype, entity)
    if error != ErrorCode.NONE:
        raise kafka_error(error, message, what)
    if args.json:
        print_json({"entity": what, "set": {o.name: o.value for o in ops if o.op == ca.SET}})
    elif rtype == ca.BROKER and not entity:
        print("Completed updating default config for brokers in the cluster.")
    else:
        print(f"Completed updating config for {what}.")
    return 0


def _what(rtype: int, name: str) -> str:
    if rtype == ca.BROKER:
        return f"broker {name}" if name else "the brokers' default"
    return f"topic {name}"


def _describe(client: BlockingClient, args: argparse.Namespace, entity: str | None) -> int:
    rtype = ENTITY_TYPES[args.entity_type]
    if entity is None:
        cluster = client.metadata(None)
        names = (
            sorted(cluster.topics)
            if rtype == ca.TOPIC
            else [str(b) for b in sorted(cluster.brokers)]
        )
    else:
        names = [entity]
    results = client.run(ca.describe_configs(client.client, [(rtype, n) for n in names]))
    failures = [r for r in results if r.error_code != ErrorCode.NONE]
    if args.json:
        print_json(
            [
                {
                    "entity": _what(r.resource_type, r.resource_name),
                    "configs": [entry_json(e) for e in shown(r, args.all)],
                }
                for r in results
                if r.error_code == ErrorCode.NONE
            ]
        )
    else:
        for r in results:
            if r.error_code != ErrorCode.NONE:
                continue
            print(heading(r, args.all))
            for entry in shown(r, args.all):
                print(format_entry(entry))
    if failures:
        first = failures[0]
        if len(failures) == 1:
            raise kafka_error(
                first.error_code,
                first.error_message,
                _what(first.resource_type, first.resource_name),
            )
        raise CommandError(
            "; ".join(
                f"{_what(r.resource_type, r.resource_name)}: {r.error_code.name}"
                + (f": {r.error_message}" if r.error_message else "")
                for r in failures
            )
        )
    return 0


COMMANDS["configs"] = (
    "describe and alter topic and broker configs and client quotas (like kafka-configs.sh)",
    add_arguments,
    run,
)
