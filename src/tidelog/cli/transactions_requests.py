"""The requests of ``tidelog transactions`` (KIP-664): ListTransactions at every broker,
FindCoordinator and DescribeTransactions for an id, DescribeProducers and WriteTxnMarkers
at a partition's leader, and the partitions find-hanging looks at.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kio.index import load_request_schema

from tidelog.cli.output import CommandError
from tidelog.cli.transactions_views import (
    OpenTxn,
    ProducerView,
    TxnDescription,
    TxnListing,
    hanging_transactions,
    marker_coordinator_epoch,
    open_transactions,
    tp_text,
)
from tidelog.client import BlockingClient
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.messages import build

FIND_COORDINATOR_V: Final = 3
KEY_TYPE_TRANSACTION: Final = 1
DESCRIBE_PRODUCERS_V: Final = 0
WRITE_TXN_MARKERS_V: Final = 1
#: How long ``describe`` waits for a coordinator (``__transaction_state`` is created on the
#: first FindCoordinator and needs leaders first).
COORDINATOR_WAIT_S: Final = 20.0
_RETRY_S: Final = 0.5
_COORDINATOR_RETRIABLE: Final = frozenset(
    {
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.NOT_COORDINATOR,
    }
)
_LEADER_RETRIABLE: Final = frozenset(
    {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE}
)
_HINTS: Final[Mapping[ErrorCode, str]] = {
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: "check the id with `tidelog transactions list`",
    ErrorCode.COORDINATOR_NOT_AVAILABLE: "the transaction coordinator is not ready; retry",
    ErrorCode.INVALID_PRODUCER_EPOCH: (
        "a newer epoch of that producer already wrote to the partition; "
        "check `tidelog transactions describe-producers`"
    ),
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: (
        "the coordinator epoch is older than the partition's; "
        "take it from `tidelog transactions describe-producers`"
    ),
}


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode._value2member_map_[int(value)]  # type: ignore[return-value]
    except KeyError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def command_error(code: ErrorCode, what: str, message: str | None = None) -> CommandError:
    detail = f"{what}: {message}" if message else what
    return CommandError(detail, code=code, hint=_HINTS.get(code))


def _request(api: ApiKey, version: int, data: Mapping[str, Any]) -> Any:
    return build(load_request_schema(api, version), data)


def now_ms() -> int:
    return int(time.time() * 1000)


def _supported_version(client: BlockingClient, node_id: int, api: ApiKey, highest: int) -> int:
    low, high = client.api_versions(node_id).get(int(api), (0, -1))
    version = min(high, highest)
    if version < low:
        raise CommandError(
            f"broker {node_id} does not implement {api.name}", code=ErrorCode.UNSUPPORTED_VERSION
        )
    return version


def list_transactions(
    client: BlockingClient,
    states: Sequence[str] = (),
    producer_ids: Sequence[int] = (),
    duration_ms: int | None = None,
    id_pattern: str | None = None,
) -> tuple[list[TxnListing], list[str]]:
    """Every broker's transactions that pass the filters, and the state filters a broker
    did not know. ``id_pattern`` (KIP-1152) needs ListTransactions v2."""
    cluster = client.metadata(None)
    listings: list[TxnListing] = []
    unknown: set[str] = set()
    for node_id in sorted(cluster.brokers):
        version = _supported_version(client, node_id, ApiKey.LIST_TRANSACTIONS, 2)
        data: dict[str, Any] = {
            "state_filters": list(states),
            "producer_id_filters": list(producer_ids),
        }
        if duration_ms is not None:
            if version < 1:
                raise CommandError(
                    f"broker {node_id} does not take a duration filter (ListTransactions v1)",
                    code=ErrorCode.UNSUPPORTED_VERSION,
                )
            data["duration_filter"] = duration_ms
        if id_pattern:
            if version < 2:
                raise CommandError(
                    f"broker {node_id} does not take a transactional id pattern "
                    "(ListTransactions v2)",
                    code=ErrorCode.UNSUPPORTED_VERSION,
                )
            data["transactional_id_pattern"] = id_pattern
        response = client.send(_request(ApiKey.LIST_TRANSACTIONS, version, data), node_id=node_id)
        if response.error_code != ErrorCode.NONE:
            raise command_error(_code(response.error_code), f"broker {node_id}")
        unknown.update(str(s) for s in response.unknown_state_filters)
        listings += [
            TxnListing(
                str(t.transactional_id), node_id, int(t.producer_id), str(t.transaction_state)
            )
            for t in response.transaction_states
        ]
    listings.sort(key=lambda x: (x.transactional_id, x.coordinator))
    return listings, sorted(unknown)


def find_coordinator(client: BlockingClient, transactional_id: str) -> tuple[int, str, int]:
    """(node id, host, port) of ``transactional_id``'s coordinator, waiting out the
    retriable answers for up to ``COORDINATOR_WAIT_S``."""
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    while True:
        response = client.send(
            _request(
                ApiKey.FIND_COORDINATOR,
                FIND_COORDINATOR_V,
                {"key": transactional_id, "key_type": KEY_TYPE_TRANSACTION},
            )
        )
        code = _code(response.error_code)
        if code == ErrorCode.NONE:
            return int(response.node_id), str(response.host), int(response.port)
        if code not in _COORDINATOR_RETRIABLE or time.monotonic() > deadline:
            raise command_error(
                code,
                f"coordinator of transactional id '{transactional_id}'",
                response.error_message,
            )
        time.sleep(_RETRY_S)


def describe_transaction(client: BlockingClient, transactional_id: str) -> TxnDescription:
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    while True:
        node_id, _host, _port = find_coordinator(client, transactional_id)
        (state,) = client.describe_transactions([transactional_id], node_id=node_id)
        code = state.error_code
        if code == ErrorCode.NONE:
            break
        if code not in _COORDINATOR_RETRIABLE or time.monotonic() > deadline:
            raise command_error(code, f"transactional id '{transactional_id}'")
        time.sleep(_RETRY_S)
    return TxnDescription(
        coordinator=node_id,
        transactional_id=transactional_id,
        producer_id=state.producer_id,
        producer_epoch=state.producer_epoch,
        state=state.state,
        timeout_ms=state.timeout_ms,
        start_ms=state.start_ms,
        partitions=state.partitions,
    )


def _leader(client: BlockingClient, tp: TopicPartition, refresh: bool) -> int:
    cluster = client.client.cluster
    if refresh or cluster is None or tp.topic not in cluster.topics:
        cluster = client.metadata([tp.topic])
    topic = cluster.topics.get(tp.topic)
    if topic is not None and topic.error_code != ErrorCode.NONE:
        raise command_error(topic.error_code, f"partition {tp_text(tp)}")
    if topic is None or tp.partition not in topic.partitions:
        raise command_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {tp_text(tp)}")
    leader = cluster.leader_for(tp)
    if leader is None:
        raise command_error(ErrorCode.LEADER_NOT_AVAILABLE, f"partition {tp_text(tp)}")
    return leader


def describe_producers(
    client: BlockingClient, tps: Sequence[TopicPartition], attempts: int = 3
) -> dict[TopicPartition, tuple[ProducerView, ...]]:
    """DescribeProducers at each partition's leader (one request per leader); a leader that
    moved meanwhile is looked up again."""
    out: dict[TopicPartition, tuple[ProducerView, ...]] = {}
    remaining = list(dict.fromkeys(tps))
    for attempt in range(attempts):
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in remaining:
            by_leader.setdefault(_leader(client, tp, refresh=attempt > 0), []).append(tp)
        retry: list[TopicPartition] = []
        for leader, leader_tps in sorted(by_leader.items()):
            topics: dict[str, list[int]] = {}
            for tp in leader_tps:
                topics.setdefault(tp.topic, []).append(tp.partition)
            response = client.send(
                _request(
                    ApiKey.DESCRIBE_PRODUCERS,
                    DESCRIBE_PRODUCERS_V,
                    {"topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]},
                ),
                node_id=leader,
            )
            for topic in response.topics:
                for part in topic.partitions:
                    tp = TopicPartition(str(topic.name), int(part.partition_index))
                    code = _code(part.error_code)
                    if code in _LEADER_RETRIABLE and attempt + 1 < attempts:
                        retry.append(tp)
                    elif code != ErrorCode.NONE:
                        raise command_error(code, f"partition {tp_text(tp)}", part.error_message)
                    else:
                        out[tp] = tuple(
                            ProducerView(
                                producer_id=int(p.producer_id),
                                producer_epoch=int(p.producer_epoch),
                                last_sequence=int(p.last_sequence),
                                last_timestamp=int(p.last_timestamp),
                                coordinator_epoch=int(p.coordinator_epoch),
                                current_txn_start_offset=int(p.current_txn_start_offset),
                            )
                            for p in part.active_producers
                        )
        if not retry:
            break
        remaining = retry
        time.sleep(_RETRY_S)
    return out


def abort_transaction(
    client: BlockingClient,
    tp: TopicPartition,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
) -> ErrorCode:
    """An ABORT marker of the producer in ``tp`` (WriteTxnMarkers at its leader)."""
    request = _request(
        ApiKey.WRITE_TXN_MARKERS,
        WRITE_TXN_MARKERS_V,
        {
            "markers": [
                {
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "transaction_result": False,
                    "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}],
                    "coordinator_epoch": marker_coordinator_epoch(coordinator_epoch),
                }
            ]
        },
    )
    response = client.send(request, node_id=_leader(client, tp, refresh=True))
    for marker in response.markers:
        for topic in marker.topics:
            for part in topic.partitions:
                if str(topic.name) == tp.topic and int(part.partition_index) == tp.partition:
                    return _code(part.error_code)
    return ErrorCode.UNKNOWN_SERVER_ERROR


def partitions_of_broker(client: BlockingClient, broker_id: int) -> list[TopicPartition]:
    """Every partition with a replica on ``broker_id`` (internal topics too: a hanging
    transaction may hold ``__consumer_offsets`` back as well)."""
    cluster = client.metadata(None)
    return sorted(
        TopicPartition(name, p.partition)
        for name, topic in cluster.topics.items()
        for p in topic.partitions.values()
        if broker_id in p.replicas
    )


def partitions_of_topic(client: BlockingClient, topic: str) -> list[TopicPartition]:
    cluster = client.metadata([topic])
    info = cluster.topics.get(topic)
    if info is None or info.error_code != ErrorCode.NONE:
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if info is None else info.error_code
        raise command_error(code, f"topic '{topic}'")
    return [TopicPartition(topic, p) for p in sorted(info.partitions)]


def find_hanging(
    client: BlockingClient, tps: Sequence[TopicPartition], max_timeout_ms: int
) -> list[OpenTxn]:
    now = now_ms()
    candidates = open_transactions(describe_producers(client, tps), now, max_timeout_ms)
    if not candidates:
        return []
    pids = sorted({c.producer.producer_id for c in candidates})
    listings, _unknown = list_transactions(client, producer_ids=pids)
    txn_ids = {x.producer_id: x.transactional_id for x in listings if x.producer_id in pids}
    descriptions: dict[str, TxnDescription | None] = {}
    for txn_id in sorted(set(txn_ids.values())):
        try:
            descriptions[txn_id] = describe_transaction(client, txn_id)
        except CommandError as exc:
            if exc.code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                raise
            descriptions[txn_id] = None
    return hanging_transactions(candidates, txn_ids, descriptions)
