"""``tidelog groups delete-offsets``: kafka-consumer-groups.sh ``--delete-offsets``.

OffsetDelete (API 47, KIP-496) at the group's coordinator for ``--topic T`` (every
partition the metadata shows; an unknown topic is a row of its own, partition ``Not
Provided``) or ``T:0,1``. The coordinator deletes the offsets of an Empty group, and of a
consumer group's topics no live member subscribes to; a subscribed topic's partitions answer
GROUP_SUBSCRIBED_TO_TOPIC. One row per partition (``TOPIC PARTITION STATUS``: ``Successful``
or ``Error: CODE``); any error also prints Kafka's message for the group on stderr and the
command exits 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Final

from tidelog.cli.groups import ACTIONS, coordinator_of, group_request
from tidelog.cli.output import CommandError, UsageError, format_table, print_json
from tidelog.cli.reset_plans import PlanError, parse_topic_partitions
from tidelog.client import BlockingClient
from tidelog.client.wire import error_code
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey

OFFSET_DELETE_V = 0

#: Kafka's ``ConsumerGroupCommand.deleteOffsets`` messages for the group's outcome.
GROUP_MESSAGES: Final[Mapping[ErrorCode, str]] = {
    ErrorCode.INVALID_GROUP_ID: "'{group}' is not valid.",
    ErrorCode.GROUP_ID_NOT_FOUND: "'{group}' does not exist.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Access to '{group}' is not authorized.",
    ErrorCode.NON_EMPTY_GROUP: (
        "Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty."
    ),
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: (
        "Encounter some partition level error, see the follow-up details:"
    ),
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: (
        "Encounter some partition level error, see the follow-up details:"
    ),
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: (
        "Encounter some partition level error, see the follow-up details:"
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--group", required=True, help="the group")
    parser.add_argument(
        "--topic",
        action="append",
        required=True,
        metavar="TOPIC[:P,...]",
        help="topic, or its partitions (repeatable)",
    )


def _partitions(
    client: BlockingClient, specs: list[str]
) -> tuple[list[TopicPartition], dict[TopicPartition, ErrorCode]]:
    """The partitions to delete, and the unknown topics (partition -1) with their error."""
    try:
        parsed = [parse_topic_partitions(spec) for spec in specs]
    except PlanError as exc:
        raise UsageError(str(exc)) from None
    whole = sorted({topic for topic, partitions in parsed if partitions is None})
    cluster = client.metadata(whole) if whole else None
    known: list[TopicPartition] = []
    failed: dict[TopicPartition, ErrorCode] = {}
    for topic, partitions in parsed:
        if partitions is not None:
            known += [TopicPartition(topic, p) for p in partitions]
            continue
        assert cluster is not None
        meta = cluster.topics.get(topic)
        if meta is None or meta.error_code != ErrorCode.NONE:
            code = meta.error_code if meta else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            failed[TopicPartition(topic, -1)] = code
        else:
            known += [TopicPartition(topic, p) for p in sorted(meta.partitions)]
    return sorted(set(known)), failed


def delete_offsets(
    client: BlockingClient, group: str, tps: list[TopicPartition]
) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
    """OffsetDelete: the group's error and each partition's (the group's when it failed)."""
    if not tps:
        return ErrorCode.NONE, {}
    node = coordinator_of(client, group)
    by_topic: dict[str, list[dict[str, int]]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition})
    response = client.send(
        group_request(
            ApiKey.OFFSET_DELETE,
            OFFSET_DELETE_V,
            {
                "group_id": group,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            },
        ),
        node_id=node,
    )
    top = error_code(response.error_code)
    answered = {
        TopicPartition(str(t.name), int(p.partition_index)): error_code(p.error_code)
        for t in response.topics
        for p in t.partitions
    }
    if top != ErrorCode.NONE:
        return top, dict.fromkeys(tps, top)
    return top, {tp: answered.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in tps}


def run(client: BlockingClient, args: argparse.Namespace) -> int:
    group = str(args.group)
    tps, failed = _partitions(client, args.topic)
    top, results = delete_offsets(client, group, tps)
    results.update(failed)
    rows = sorted(results.items())
    if top == ErrorCode.NONE:
        top = next((e for _, e in rows if e != ErrorCode.NONE), ErrorCode.NONE)
    if args.json:
        print_json(
            {
                "group": group,
                "error": None if top == ErrorCode.NONE else top.name,
                "partitions": [
                    {
                        "topic": tp.topic,
                        "partition": tp.partition if tp.partition >= 0 else None,
                        "error": None if e == ErrorCode.NONE else e.name,
                    }
                    for tp, e in rows
                ],
            }
        )
    else:
        if top == ErrorCode.NONE:
            topics = ", ".join(dict.fromkeys(s.partition(":")[0] for s in args.topic))
            print(f"Request succeed for deleting offsets with topic {topics} group {group}\n")
        print(
            format_table(
                ["TOPIC", "PARTITION", "STATUS"],
                [
                    [
                        tp.topic,
                        tp.partition if tp.partition >= 0 else "Not Provided",
                        "Successful" if e == ErrorCode.NONE else f"Error: {e.name}",
                    ]
                    for tp, e in rows
                ],
            )
        )
    if top != ErrorCode.NONE:
        message = GROUP_MESSAGES.get(top, "Encounter some unknown error: {code}")
        hint = (
            "a live member subscribes to the topic; stop the group's consumers first"
            if top == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else None
        )
        raise CommandError(message.format(group=group, code=top.name), code=top, hint=hint)
    return 0


ACTIONS["delete-offsets"] = (
    "delete a group's committed offsets of topics (OffsetDelete)",
    add_arguments,
    run,
)
