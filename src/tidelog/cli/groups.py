"""``tidelog groups list|describe|delete``: consumer groups, as kafka-consumer-groups.sh shows them.

- ``list``: every group of every broker (ListGroups goes to each broker: each coordinates
  its own share), with its state and protocol type.
- ``describe [--group G]``: per group its state, coordinator and members (id, client id,
  host, assigned partitions, decoded from the consumer protocol's assignment), then one row
  per partition with the committed offset, the log end offset (what a consumer can read up
  to: the high watermark) and the lag between them.
- ``delete --group G``: DeleteGroups at the coordinator (only an Empty group; its offsets go).
- ``reset-offsets`` and ``delete-offsets`` live in ``group_offsets`` and
  ``group_offset_delete``, registered in ``ACTIONS``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.index import load_request_schema

from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    add_bootstrap_flags,
    add_json_flag,
    format_table,
    kafka_error,
    print_json,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.client import BlockingClient
from tidelog.client.consumer_protocol import decode_assignment
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.list_offsets import LATEST_TIMESTAMP
from tidelog.protocol.messages import build

FIND_COORDINATOR_V = 3
DESCRIBE_GROUPS_V = 5
LIST_GROUPS_V = 5
OFFSET_FETCH_V = 7
DELETE_GROUPS_V = 2


#: Actions other modules add (``group_offsets``, ``group_offset_delete``): name -> (help,
#: add_arguments, run with the command's client).
GroupAction = tuple[
    str,
    Callable[[argparse.ArgumentParser], None],
    Callable[[BlockingClient, argparse.Namespace], int],
]
ACTIONS: dict[str, GroupAction] = {}


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class PartitionView:
    tp: TopicPartition
    current_offset: int | None
    log_end_offset: int | None
    member: MemberView | None

    @property
    def lag(self) -> int | None:
        if self.current_offset is None or self.log_end_offset is None:
            return None
        return max(0, self.log_end_offset - self.current_offset)


@dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    coordinator: int
    members: tuple[MemberView, ...]
    partitions: tuple[PartitionView, ...] = field(default=())


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode._value2member_map_[int(value)]  # type: ignore[return-value]
    except KeyError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def group_request(api: ApiKey, version: int, data: Mapping[str, Any]) -> Any:
    """Request ``api`` at ``version`` from a version-independent dict."""
    return build(load_request_schema(api, version), data)


def coordinator_of(client: BlockingClient, group: str, *, timeout_s: float = 10.0) -> int:
    """The group's coordinator. A retriable error (COORDINATOR_NOT_AVAILABLE while the first
    FindCoordinator creates ``__consumer_offsets``) is retried, as Kafka's admin client does,
    for up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = client.send(
            group_request(
                ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_V, {"key": group, "key_type": 0}
            )
        )
        code = _code(response.error_code)
        if code == ErrorCode.NONE:
            return int(response.node_id)
        if not code.retriable or time.monotonic() >= deadline:
            raise kafka_error(code, response.error_message, f"group '{group}'")
        time.sleep(0.2)


def list_groups(
    client: BlockingClient, states: Sequence[str] = (), types: Sequence[str] = ()
) -> list[tuple[str, str, str, int]]:
    """(group, state, protocol type, coordinator) of every broker's groups; with ``states``
    or ``types`` only those in one of them (ListGroups v4's state filter, v5's type filter:
    KIP-518, KIP-848; the broker matches them case-insensitively)."""
    cluster = client.metadata(None)
    out = []
    body = {"states_filter": list(states), "types_filter": list(types)}
    for node_id in sorted(cluster.brokers):
        response = client.send(
            group_request(ApiKey.LIST_GROUPS, LIST_GROUPS_V, body), node_id=node_id
        )
        if response.error_code != ErrorCode.NONE:
            raise kafka_error(_code(response.error_code), None, f"broker {node_id}")
        out += [
            (str(g.group_id), str(g.group_state), str(g.protocol_type), node_id)
            for g in response.groups
        ]
    return sorted(out)


def committed_offsets(client: BlockingClient, node: int, group: str) -> dict[TopicPartition, int]:
    """Every offset ``group`` committed (OffsetFetch of all topics at its coordinator)."""
    fetched = client.send(
        group_request(ApiKey.OFFSET_FETCH, OFFSET_FETCH_V, {"group_id": group, "topics": None}),
        node_id=node,
    )
    if fetched.error_code != ErrorCode.NONE:
        raise kafka_error(_code(fetched.error_code), None, f"offsets of group '{group}'")
    return {
        TopicPartition(str(t.name), int(p.partition_index)): int(p.committed_offset)
        for t in fetched.topics
        for p in t.partitions
        if int(p.committed_offset) >= 0
    }


def described_group(client: BlockingClient, node: int, group: str) -> Any:
    """DescribeGroups of ``group`` at its coordinator ``node``: the group's entry, or the
    group's error as a CommandError."""
    described = client.send(
        group_request(
            ApiKey.DESCRIBE_GROUPS,
            DESCRIBE_GROUPS_V,
            {"groups": [group], "include_authorized_operations": False},
        ),
        node_id=node,
    ).groups[0]
    if described.error_code != ErrorCode.NONE:
        raise kafka_error(_code(described.error_code), None, f"group '{group}'")
    return described


def describe_group(client: BlockingClient, group: str) -> GroupView:
    node = coordinator_of(client, group)
    described = described_group(client, node, group)
    members = tuple(
        MemberView(
            str(m.member_id),
            str(m.client_id),
            str(m.client_host),
            m.group_instance_id,
            decode_assignment(bytes(m.member_assignment))
            if described.protocol_type == "consumer"
            else (),
        )
        for m in described.members
    )
    committed = committed_offsets(client, node, group)
    owner = {tp: m for m in members for tp in m.assignment}
    tps = sorted(set(committed) | set(owner))
    ends: dict[TopicPartition, int] = {}
    if tps:
        for tp, result in client.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP)).items():
            if result.error_code == ErrorCode.NONE:
                ends[tp] = result.offset
    partitions = tuple(
        PartitionView(tp, committed.get(tp), ends.get(tp), owner.get(tp)) for tp in tps
    )
    return GroupView(
        group,
        str(described.group_state),
        str(described.protocol_type),
        str(described.protocol_data),
        node,
        members,
        partitions,
    )


def _dash(value: object) -> object:
    return "-" if value is None else value


def format_group(view: GroupView) -> str:
    lines = [
        f"Consumer group '{view.group_id}': {view.state}, {len(view.members)} member(s), "
        f"coordinator {view.coordinator}" + (f", assignor {view.protocol}" if view.protocol else "")
    ]
    if view.members:
        lines += [
            "",
            format_table(
                ["CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
                [
                    [
                        m.member_id,
                        m.host,
                        m.client_id,
                        len(m.assignment),
                        ",".join(f"{tp.topic}-{tp.partition}" for tp in m.assignment) or "-",
                    ]
                    for m in view.members
                ],
            ),
        ]
    lines += [
        "",
        format_table(
            [
                "GROUP",
                "TOPIC",
                "PARTITION",
                "CURRENT-OFFSET",
                "LOG-END-OFFSET",
                "LAG",
                "CONSUMER-ID",
                "HOST",
                "CLIENT-ID",
            ],
            [
                [
                    view.group_id,
                    p.tp.topic,
                    p.tp.partition,
                    _dash(p.current_offset),
                    _dash(p.log_end_offset),
                    _dash(p.lag),
                    p.member.member_id if p.member else "-",
                    p.member.host if p.member else "-",
                    p.member.client_id if p.member else "-",
                ]
                for p in view.partitions
            ],
        ),
    ]
    return "\n".join(lines)


def group_to_json(view: GroupView) -> dict[str, Any]:
    return {
        "group": view.group_id,
        "state": view.state,
        "protocol_type": view.protocol_type,
        "assignor": view.protocol,
        "coordinator": view.coordinator,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": [
                    {"topic": tp.topic, "partition": tp.partition} for tp in m.assignment
                ],
            }
            for m in view.members
        ],
        "partitions": [
            {
                "topic": p.tp.topic,
                "partition": p.tp.partition,
                "current_offset": p.current_offset,
                "log_end_offset": p.log_end_offset,
                "lag": p.lag,
                "member_id": p.member.member_id if p.member else None,
            }
            for p in view.partitions
        ],
    }


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected one or more comma-separated names")
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_bootstrap_flags(p)
        add_json_flag(p)
        return p

    listing = add("list", "every consumer group with its state (ListGroups on every broker)")
    listing.add_argument(
        "--state",
        type=_names,
        default=[],
        help="only groups in these states, comma-separated (Stable,Empty,...)",
    )
    listing.add_argument(
        "--type",
        type=_names,
        default=[],
        help="only groups of these types, comma-separated (classic; consumer is KIP-848's)",
    )
    describe = add("describe", "members, assignments, committed offsets and lag")
    describe.add_argument("--group", action="append", help="group (repeatable; default: all)")
    delete = add("delete", "delete an empty group and its committed offsets (DeleteGroups)")
    delete.add_argument("--group", action="append", required=True)
    for name, (help_text, add_action_arguments, _run) in ACTIONS.items():
        add_action_arguments(add(name, help_text))


def run(args: argparse.Namespace) -> int:
    bootstrap = resolve_bootstrap(args)
    with BlockingClient(
        bootstrap, client_id="tidelog-cli", security=resolve_security(args)
    ) as client:
        if args.action == "list":
            groups = list_groups(client, args.state, args.type)
            if args.json:
                print_json(
                    [
                        {"group": g, "state": s, "protocol_type": t, "coordinator": c}
                        for g, s, t, c in groups
                    ]
                )
            elif groups:
                print(format_table(["GROUP", "STATE", "PROTOCOL-TYPE", "COORDINATOR"], groups))
            return 0
        if args.action == "describe":
            names: Sequence[str] = args.group or [g for g, *_ in list_groups(client)]
            views = [describe_group(client, name) for name in names]
            if args.json:
                print_json([group_to_json(v) for v in views])
            else:
                print("\n\n".join(format_group(v) for v in views))
            return 0
        if args.action == "delete":
            return _delete(client, args)
        if args.action in ACTIONS:
            return ACTIONS[args.action][2](client, args)
    raise AssertionError(args.action)


def _delete(client: BlockingClient, args: argparse.Namespace) -> int:
    results = {}
    for group in args.group:
        node = coordinator_of(client, group)
        response = client.send(
            group_request(ApiKey.DELETE_GROUPS, DELETE_GROUPS_V, {"groups_names": [group]}),
            node_id=node,
        )
        results[group] = _code(response.results[0].error_code)
    failed = {g: e for g, e in results.items() if e != ErrorCode.NONE}
    if args.json:
        print_json({g: e.name for g, e in results.items()})
    else:
        for g, e in results.items():
            if e == ErrorCode.NONE:
                print(f"Deleted group '{g}'.")
    if failed:
        group, error = next(iter(failed.items()))
        hints = {
            ErrorCode.NON_EMPTY_GROUP: "the group has members; stop its consumers first",
            ErrorCode.GROUP_ID_NOT_FOUND: "check the name with `tidelog groups list`",
        }
        raise CommandError(f"group '{group}'", code=error, hint=hints.get(error))
    return 0


COMMANDS["groups"] = (
    "list, describe and delete consumer groups; reset and delete their offsets",
    add_arguments,
    run,
)
