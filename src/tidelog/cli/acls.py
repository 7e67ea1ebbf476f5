"""``tidelog acls add|list|remove``: ACLs, as ``kafka-acls.sh --add|--list|--remove`` manages
them (CreateAcls, DescribeAcls, DeleteAcls; ``tidelog.client.security_admin``).

Options (Kafka's names):

- Resources: ``--topic NAME``, ``--group NAME``, ``--transactional-id NAME`` (each
  repeatable) and ``--cluster`` (the resource ``kafka-cluster``), with
  ``--resource-pattern-type literal|prefixed|match|any`` (default: literal for ``add``,
  any for ``list`` and ``remove``; ``add`` takes only literal or prefixed).
- Who: ``--allow-principal``/``--deny-principal Type:name`` (repeatable, ``User:alice``),
  from ``--allow-host``/``--deny-host`` (repeatable; default ``*``: every host; each needs
  its principal option).
- What: ``--operation NAME`` (repeatable, Kafka's names in any case or spelling: Read,
  Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs,
  IdempotentWrite, CreateTokens, DescribeTokens, All; ``add``'s default is All), or the
  conveniences ``--producer`` (WRITE, DESCRIBE, CREATE on each topic; WRITE, DESCRIBE on
  each transactional id; IDEMPOTENT_WRITE on the cluster with ``--idempotent``) and
  ``--consumer`` (READ, DESCRIBE on each topic, READ on each group).

Rules:

1. ``add`` needs a principal and a resource. Each operation must be one the resource type
   supports (Kafka's ``AclEntry.supportedOperations`` plus All); every binding passes the
   broker's own checks (``tidelog.security.acls.binding_error``) before anything is sent.
2. ``--producer`` needs a ``--topic`` and takes no ``--group``/``--cluster`` (unless with
   ``--consumer``); ``--consumer`` needs a ``--topic`` and a ``--group`` and takes no
   ``--cluster``/``--transactional-id`` (unless with ``--producer``); ``--idempotent`` needs
   ``--producer``; neither goes with ``--operation``, and on ``remove`` both need a
   principal (so they never remove every ACL of a resource).
3. ``remove`` needs a resource and deletes the ACLs matching every option given; an option
   not given matches anything (tidelog's rule: kafka-acls.sh would match only the
   operation All and the host ``*``). It asks no question (``--force`` is accepted, as
   Kafka's, and changes nothing) and prints what the brokers removed.
4. ``list`` shows the ACLs of the resources given (every ACL without one), optionally only
   those of ``--principal`` (repeatable), grouped by resource pattern as kafka-acls.sh
   prints them: ``Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t,
   patternType=LITERAL)`:`` then one ``(principal=User:alice, host=*, operation=READ,
   permissionType=ALLOW)`` line per ACL. ``--json`` prints a list of bindings.
5. Option mistakes are usage errors (exit 2, nothing sent). A broker's refusal
   (SECURITY_DISABLED, CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, ...) prints its code
   and message and exits 1, after printing what did succeed.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    UsageError,
    add_bootstrap_flags,
    add_json_flag,
    print_json,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.client import BlockingClient
from tidelog.client import security_admin as sa
from tidelog.errors import ErrorCode
from tidelog.security.acls import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding_error,
)
from tidelog.security.principal import KafkaPrincipal

_O = AclOperation
#: Rule 1: Kafka's ``AclEntry.supportedOperations`` (All is allowed everywhere besides).
SUPPORTED_OPERATIONS: Final[Mapping[ResourceType, frozenset[AclOperation]]] = {
    ResourceType.TOPIC: frozenset(
        {
            _O.READ,
            _O.WRITE,
            _O.CREATE,
            _O.DESCRIBE,
            _O.DELETE,
            _O.ALTER,
            _O.DESCRIBE_CONFIGS,
            _O.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset({_O.READ, _O.DESCRIBE, _O.DELETE}),
    ResourceType.CLUSTER: frozenset(
        {
            _O.CREATE,
            _O.CLUSTER_ACTION,
            _O.DESCRIBE_CONFIGS,
            _O.ALTER_CONFIGS,
            _O.IDEMPOTENT_WRITE,
            _O.ALTER,
            _O.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE}),
}
#: ``--operation`` names, in kafka-acls.sh's order.
OPERATION_NAMES: Final = (
    *(op.kafka_name for op in AclOperation if op not in (_O.UNKNOWN, _O.ANY, _O.ALL)),
    _O.ALL.kafka_name,
)
PATTERN_TYPES: Final = ("literal", "prefixed", "match", "any")

PRODUCER_TOPIC_OPS: Final = (_O.WRITE, _O.DESCRIBE, _O.CREATE)
PRODUCER_TXN_OPS: Final = (_O.WRITE, _O.DESCRIBE)
CONSUMER_TOPIC_OPS: Final = (_O.READ, _O.DESCRIBE)
CONSUMER_GROUP_OPS: Final = (_O.READ,)


# --- argument types ------------------------------------------------------------------------


def operation_arg(text: str) -> AclOperation:
    op = AclOperation.from_name(text.strip())
    if op in (_O.UNKNOWN, _O.ANY):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an operation; valid operation names are: "
            + ", ".join(OPERATION_NAMES)
        )
    return op


def principal_arg(text: str) -> str:
    """Kafka's ``SecurityUtils.parseKafkaPrincipal``: ``Type:name``."""
    try:
        return str(KafkaPrincipal.parse(text.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a string in format principalType:principalName (User:alice) but got {text!r}"
        ) from None


def pattern_type_arg(text: str) -> PatternType:
    pattern = PatternType.from_name(text.strip())
    if pattern == PatternType.UNKNOWN:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a pattern type; use one of: {', '.join(PATTERN_TYPES)}"
        )
    return pattern


def name_arg(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("the name is empty")
    return text


# --- pure: options -> resources, bindings, filters ----------------------------------------


def resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    """The resources the options name, in option order (type, name)."""
    found = [(ResourceType.TOPIC, t) for t in args.topic or ()]
    found += [(ResourceType.GROUP, g) for g in args.group or ()]
    if args.cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    found += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id or ()]
    return list(dict.fromkeys(found))


def _check_hosts(args: argparse.Namespace) -> None:
    if args.allow_host and not args.allow_principal:
        raise UsageError("--allow-host needs --allow-principal")
    if args.deny_host and not args.deny_principal:
        raise UsageError("--deny-host needs --deny-principal")


def _check_conveniences(args: argparse.Namespace) -> None:
    """Rule 2."""
    if args.idempotent and not args.producer:
        raise UsageError("the --idempotent option is only available if --producer is set")
    if not (args.producer or args.consumer):
        return
    if args.operation:
        raise UsageError("--operation cannot be used with --producer or --consumer")
    if args.producer and not args.topic:
        raise UsageError("with --producer you must specify a --topic")
    if args.producer and not args.consumer and (args.group or args.cluster):
        raise UsageError(
            "--producer gives ACLs on --topic and --transactional-id (and on the cluster "
            "with --idempotent): --group and --cluster need --consumer or --operation"
        )
    if args.consumer and (
        not args.topic
        or not args.group
        or (not args.producer and (args.cluster or args.transactional_id))
    ):
        raise UsageError(
            "with --consumer you must specify a --topic and a --group and no --cluster or "
            "--transactional-id option should be specified"
        )


def operations_by_resource(
    args: argparse.Namespace, default: AclOperation
) -> dict[tuple[ResourceType, str], tuple[AclOperation, ...]]:
    """Each resource's operations: ``--operation`` (``default`` when none), or the
    ``--producer``/``--consumer`` sets (rule 2)."""
    named = resources(args)
    if not (args.producer or args.consumer):
        ops = tuple(dict.fromkeys(args.operation)) if args.operation else (default,)
        return dict.fromkeys(named, ops)
    result: dict[tuple[ResourceType, str], tuple[AclOperation, ...]] = {}

    def give(resource: tuple[ResourceType, str], ops: Iterable[AclOperation]) -> None:
        result[resource] = tuple(dict.fromkeys((*result.get(resource, ()), *ops)))

    for resource in named:
        kind = resource[0]
        if args.producer and kind == ResourceType.TOPIC:
            give(resource, PRODUCER_TOPIC_OPS)
        if args.producer and kind == ResourceType.TRANSACTIONAL_ID:
            give(resource, PRODUCER_TXN_OPS)
        if args.consumer and kind == ResourceType.TOPIC:
            give(resource, CONSUMER_TOPIC_OPS)
        if args.consumer and kind == ResourceType.GROUP:
            give(resource, CONSUMER_GROUP_OPS)
    if args.producer and args.idempotent:
        give((ResourceType.CLUSTER, CLUSTER_NAME), (_O.IDEMPOTENT_WRITE,))
    return result


_Who = tuple[str | None, str | None, AclPermissionType]


def _who(args: argparse.Namespace, *, default_host: str | None) -> list[_Who]:
    """(principal, host, permission) for every allow/deny principal and its hosts."""
    allow_hosts = list(dict.fromkeys(args.allow_host or [default_host]))
    deny_hosts = list(dict.fromkeys(args.deny_host or [default_host]))
    who: list[_Who] = []
    for principal in dict.fromkeys(args.allow_principal or ()):
        who += [(principal, h, AclPermissionType.ALLOW) for h in allow_hosts]
    for principal in dict.fromkeys(args.deny_principal or ()):
        who += [(principal, h, AclPermissionType.DENY) for h in deny_hosts]
    return who


def _check_operations(resource_type: ResourceType, ops: Sequence[AclOperation]) -> None:
    valid = SUPPORTED_OPERATIONS.get(resource_type, frozenset())
    if any(op not in valid and op != _O.ALL for op in ops):
        names = [op.kafka_name for op in AclOperation if op in valid] + [_O.ALL.kafka_name]
        raise UsageError(
            f"ResourceType {resource_type.name} only supports operations {', '.join(names)}"
        )


def add_bindings(args: argparse.Namespace) -> list[AclBinding]:
    """Rules 1 and 2: the bindings ``acls add`` creates (UsageError when they are wrong)."""
    _check_hosts(args)
    _check_conveniences(args)
    if not (args.allow_principal or args.deny_principal):
        raise UsageError(
            "you must specify one of: --allow-principal, --deny-principal when trying to add ACLs"
        )
    if not resources(args):
        raise UsageError(
            "you must provide at least one resource: --topic <topic> or --cluster or "
            "--group <group> or --transactional-id <id>"
        )
    pattern_type = args.resource_pattern_type or PatternType.LITERAL
    if not pattern_type.is_specific:
        raise UsageError(
            f"a '--resource-pattern-type' value of '{pattern_type.name.lower()}' is not valid "
            "when adding acls"
        )
    who = _who(args, default_host=WILDCARD_HOST)
    bindings: list[AclBinding] = []
    for (resource_type, name), ops in operations_by_resource(args, _O.ALL).items():
        _check_operations(resource_type, ops)
        pattern = ResourcePattern(resource_type, name, pattern_type)
        for (principal, host, permission), op in itertools.product(who, ops):
            assert principal is not None
            assert host is not None
            bindings.append(
                AclBinding(pattern, AccessControlEntry(principal, host, op, permission))
            )
    for binding in bindings:
        problem = binding_error(binding)
        if problem is not None:
            raise UsageError(problem, code=ErrorCode.INVALID_REQUEST)
    return list(dict.fromkeys(bindings))


def remove_filters(args: argparse.Namespace) -> list[AclBindingFilter]:
    """Rules 2 and 3: the filters ``acls remove`` sends."""
    _check_hosts(args)
    _check_conveniences(args)
    if not resources(args):
        raise UsageError(
            "you must provide at least one resource: --topic <topic> or --cluster or "
            "--group <group> or --transactional-id <id>"
        )
    has_principal = bool(args.allow_principal or args.deny_principal)
    if (args.producer or args.consumer) and not has_principal:
        raise UsageError(
            "--producer and --consumer need --allow-principal or --deny-principal on remove "
            "(without one every ACL of the resource would go)"
        )
    pattern_type = args.resource_pattern_type or PatternType.ANY
    who: list[_Who] = (
        _who(args, default_host=None) if has_principal else [(None, None, AclPermissionType.ANY)]
    )
    filters: list[AclBindingFilter] = []
    for (resource_type, name), ops in operations_by_resource(args, _O.ANY).items():
        if args.operation:
            _check_operations(resource_type, ops)
        for (principal, host, permission), op in itertools.product(who, ops):
            filters.append(
                AclBindingFilter(resource_type, name, pattern_type, principal, host, op, permission)
            )
    return list(dict.fromkeys(filters))


def list_filters(args: argparse.Namespace) -> list[AclBindingFilter]:
    """Rule 4: the DescribeAcls filters of ``acls list``."""
    pattern_type = args.resource_pattern_type or PatternType.ANY
    named: list[tuple[ResourceType, str | None]] = list(resources(args)) or [
        (ResourceType.ANY, None)
    ]
    principals: list[str | None] = list(dict.fromkeys(args.principal or ())) or [None]
    return [
        AclBindingFilter(resource_type, name, pattern_type, principal)
        for (resource_type, name), principal in itertools.product(named, principals)
    ]


# --- pure: output ----------------------------------------------------------------------------


def format_pattern(pattern: ResourcePattern) -> str:
    """Kafka's ``ResourcePattern.toString``."""
    return (
        f"ResourcePattern(resourceType={pattern.resource_type.name}, name={pattern.name}, "
        f"patternType={pattern.pattern_type.name})"
    )


def format_entry(entry: AccessControlEntry) -> str:
    """Kafka's ``AccessControlEntry.toString``."""
    return (
        f"(principal={entry.principal}, host={entry.host}, operation={entry.operation.name}, "
        f"permissionType={entry.permission.name})"
    )


def format_bindings(bindings: Iterable[AclBinding], heading: str) -> str:
    """kafka-acls.sh's layout: per resource pattern ``<heading> `<pattern>`:`` and one
    tab-indented line per entry, a blank line after each pattern."""
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in sorted(set(bindings)):
        by_pattern.setdefault(binding.pattern, []).append(binding.entry)
    blocks = []
    for pattern, entries in by_pattern.items():
        lines = [f"{heading} `{format_pattern(pattern)}`:"]
        lines += [f"\t{format_entry(e)}" for e in entries]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def binding_to_json(binding: AclBinding) -> dict[str, Any]:
    p, e = binding.pattern, binding.entry
    return {
        "resource_type": p.resource_type.name,
        "name": p.name,
        "pattern_type": p.pattern_type.name,
        "principal": e.principal,
        "host": e.host,
        "operation": e.operation.name,
        "permission_type": e.permission.name,
    }


def failure_error(failures: Sequence[tuple[str, ErrorCode, str | None]]) -> CommandError:
    """One error for the broker's refusals: (what, code, message) each (rule 5)."""
    distinct = list(dict.fromkeys((code, message) for _what, code, message in failures))
    if len(distinct) == 1:
        code, message = distinct[0]
        return CommandError(message or code.name, code=code)
    return CommandError(
        "; ".join(
            f"{what}: {code.name}{': ' + message if message else ''}"
            for what, code, message in failures
        )
    )


# --- commands -------------------------------------------------------------------------------


def _add_resource_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", action="append", type=name_arg, metavar="NAME")
    p.add_argument("--group", action="append", type=name_arg, metavar="NAME")
    p.add_argument("--cluster", action="store_true", help=f"the cluster ({CLUSTER_NAME})")
    p.add_argument("--transactional-id", action="append", type=name_arg, metavar="NAME")
    p.add_argument(
        "--resource-pattern-type",
        type=pattern_type_arg,
        metavar="|".join(PATTERN_TYPES),
        help="literal or prefixed names (default: literal for add, any for list and remove)",
    )


def _add_entry_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-principal", action="append", type=principal_arg, metavar="TYPE:NAME")
    p.add_argument("--deny-principal", action="append", type=principal_arg, metavar="TYPE:NAME")
    p.add_argument("--allow-host", action="append", metavar="HOST", help="default: *")
    p.add_argument("--deny-host", action="append", metavar="HOST", help="default: *")
    p.add_argument(
        "--operation",
        action="append",
        type=operation_arg,
        metavar="NAME",
        help=f"repeatable: {', '.join(OPERATION_NAMES)}",
    )
    p.add_argument("--producer", action="store_true", help="WRITE, DESCRIBE, CREATE on topics")
    p.add_argument(
        "--consumer", action="store_true", help="READ, DESCRIBE on topics, READ on groups"
    )
    p.add_argument(
        "--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_bootstrap_flags(p)
        add_json_flag(p)
        _add_resource_arguments(p)
        return p

    p = add("add", "add ACLs (CreateAcls)")
    _add_entry_arguments(p)
    p = add("list", "list ACLs (DescribeAcls)")
    p.add_argument(
        "--principal", action="append", type=principal_arg, metavar="TYPE:NAME", help="only these"
    )
    p = add("remove", "remove the ACLs matching the options (DeleteAcls)")
    _add_entry_arguments(p)
    p.add_argument("--force", action="store_true", help="accepted for kafka-acls.sh; asks nothing")


def _client(args: argparse.Namespace) -> BlockingClient:
    return BlockingClient(
        resolve_bootstrap(args), client_id="tidelog-cli", security=resolve_security(args)
    )


def run(args: argparse.Namespace) -> int:
    """Options are checked (rules 1-4) before anything connects."""
    if args.action == "add":
        bindings = add_bindings(args)
        with _client(args) as client:
            return _add(client, args, bindings)
    if args.action == "remove":
        filters = remove_filters(args)
        with _client(args) as client:
            return _remove(client, args, filters)
    filters = list_filters(args)
    with _client(args) as client:
        return _list(client, args, filters)


def _add(client: BlockingClient, args: argparse.Namespace, bindings: list[AclBinding]) -> int:
    results = client.run(sa.create_acls(client.client, bindings))
    added = [b for b, r in zip(bindings, results, strict=True) if r.error_code == ErrorCode.NONE]
    failures = [
        (f"{format_entry(b.entry)} on {format_pattern(b.pattern)}", r.error_code, r.error_message)
        for b, r in zip(bindings, results, strict=True)
        if r.error_code != ErrorCode.NONE
    ]
    if args.json:
        print_json({"added": [binding_to_json(b) for b in added]})
    elif added:
        print(format_bindings(added, "Adding ACLs for resource"), end="")
    if failures:
        raise failure_error(failures)
    return 0


def _remove(
    client: BlockingClient, args: argparse.Namespace, filters: list[AclBindingFilter]
) -> int:
    results = client.run(sa.delete_acls(client.client, filters))
    removed: list[AclBinding] = []
    failures: list[tuple[str, ErrorCode, str | None]] = []
    for acl_filter, result in zip(filters, results, strict=True):
        if result.error_code != ErrorCode.NONE:
            failures.append((_describe_filter(acl_filter), result.error_code, result.error_message))
            continue
        for deleted in result.matching:
            if deleted.error_code == ErrorCode.NONE:
                removed.append(deleted.binding)
            else:
                failures.append(
                    (
                        f"{format_entry(deleted.binding.entry)} on "
                        f"{format_pattern(deleted.binding.pattern)}",
                        deleted.error_code,
                        deleted.error_message,
                    )
                )
    removed = list(dict.fromkeys(removed))
    if args.json:
        print_json({"removed": [binding_to_json(b) for b in sorted(removed)]})
    elif removed:
        print(format_bindings(removed, "Removed ACLs for resource"), end="")
    elif not failures:
        print("No ACLs matched: nothing removed.")
    if failures:
        raise failure_error(failures)
    return 0


def _describe_filter(acl_filter: AclBindingFilter) -> str:
    name = "<any>" if acl_filter.name is None else acl_filter.name
    return (
        f"ResourcePatternFilter(resourceType={acl_filter.resource_type.name}, name={name}, "
        f"patternType={acl_filter.pattern_type.name})"
    )


def _list(client: BlockingClient, args: argparse.Namespace, filters: list[AclBindingFilter]) -> int:
    found: list[AclBinding] = []
    for acl_filter in filters:
        result = client.run(sa.describe_acls(client.client, acl_filter))
        if result.error_code != ErrorCode.NONE:
            raise failure_error(
                [(_describe_filter(acl_filter), result.error_code, result.error_message)]
            )
        found.extend(result.bindings)
    bindings = sorted(set(found))
    if args.json:
        print_json([binding_to_json(b) for b in bindings])
    elif bindings:
        print(format_bindings(bindings, "Current ACLs for resource"), end="")
    return 0


COMMANDS["acls"] = ("add, list and remove ACLs (like kafka-acls.sh)", add_arguments, run)
