"""``tidelog transactions``: transactions and the producers of partitions, as
kafka-transactions.sh shows them (KIP-664), and aborting a hanging transaction.

- ``list [--state S]... [--producer-id N]... [--duration-filter MS]``: ListTransactions on
  every broker (each coordinates its own share of the transactional ids), merged into one
  table: TransactionalId, Coordinator, ProducerId, TransactionState.
- ``describe --transactional-id T``: FindCoordinator (key type 1), then DescribeTransactions
  at the coordinator: producer id and epoch, state, timeout, when the current transaction
  started, how long it has been running and its partitions ("None" when no transaction
  runs, as Kafka's tool prints it).
- ``describe-producers --topic T --partition P``: DescribeProducers at the partition's
  leader: every active producer's epoch, coordinator epoch, last sequence and timestamp,
  and the first offset of its open transaction ("None": none).
- ``find-hanging (--broker-id N | --topic T [--partition P]) [--max-transaction-timeout
  MIN]``: Kafka's algorithm: the open transactions of those partitions whose producer wrote
  nothing for longer than the maximum transaction timeout (default 15 minutes), which the
  coordinator does not know of: no transactional id lists that producer id, the id is not
  found, or its current transaction does not include the partition. Those will never get a
  marker from a coordinator, and hold back the last stable offset (read_committed
  consumers) of their partition for good.
- ``abort --topic T --partition P (--start-offset O | --producer-id N --producer-epoch E
  --coordinator-epoch C)``: writes an ABORT marker for one producer into one partition
  (WriteTxnMarkers at the leader), as kafka-transactions.sh does. With ``--start-offset``
  the producer is the one whose open transaction starts at O (DescribeProducers), with
  its epoch and coordinator epoch (-1, a producer that never got a marker, becomes 0:
  no coordinator epoch is smaller).

DescribeTransactions goes through ``Client.describe_transactions``, which reads the -1 start
time of an id with no running transaction (kio's schema cannot: ``tidelog.client.describe_txn``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kio.index import load_request_schema

from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    add_bootstrap_flags,
    add_json_flag,
    format_table,
    print_json,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.client import BlockingClient
from tidelog.coordinator.txn import TxnState
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.server.apis.messages import build

FIND_COORDINATOR_V: Final = 3
KEY_TYPE_TRANSACTION: Final = 1
DESCRIBE_PRODUCERS_V: Final = 0
WRITE_TXN_MARKERS_V: Final = 1
#: How long ``describe`` waits for a coordinator (``__transaction_state`` is created on the
#: first FindCoordinator and needs leaders first).
COORDINATOR_WAIT_S: Final = 20.0
#: Kafka's default for find-hanging's ``--max-transaction-timeout`` (minutes).
DEFAULT_MAX_TXN_TIMEOUT_MIN: Final = 15
REQUEST_TIMEOUT_S: Final = 30.0
_RETRY_S: Final = 0.5
_MAX_EPOCH: Final = 32767
#: Kafka's transaction state names (``--state`` takes these).
STATE_NAMES: Final = tuple(state.value for state in TxnState)
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


# --- views ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TxnListing:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TxnDescription:
    coordinator: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    #: When the current transaction started; None when none runs (-1 on the wire).
    start_ms: int | None
    partitions: tuple[TopicPartition, ...]

    def duration_ms(self, now_ms: int) -> int | None:
        return None if self.start_ms is None else now_ms - self.start_ms


@dataclass(frozen=True, slots=True)
class ProducerView:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    #: The coordinator epoch of the producer's newest marker; -1: it never got one.
    coordinator_epoch: int
    #: The first offset of its open transaction; -1: none is open.
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class OpenTxn:
    tp: TopicPartition
    producer: ProducerView


# --- pure steps ----------------------------------------------------------------------------


def _none(value: int | None) -> str:
    return "None" if value is None else str(value)


def _tp(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def format_listings(listings: Sequence[TxnListing]) -> str:
    return format_table(
        ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
        [[x.transactional_id, x.coordinator, x.producer_id, x.state] for x in listings],
    )


def format_description(d: TxnDescription, now_ms: int) -> str:
    return format_table(
        [
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ],
        [
            [
                d.coordinator,
                d.transactional_id,
                d.producer_id,
                d.producer_epoch,
                d.state,
                d.timeout_ms,
                _none(d.start_ms),
                _none(d.duration_ms(now_ms)),
                ",".join(_tp(tp) for tp in d.partitions) or "-",
            ]
        ],
    )


def format_producers(producers: Sequence[ProducerView]) -> str:
    return format_table(
        [
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ],
        [
            [
                p.producer_id,
                p.producer_epoch,
                p.coordinator_epoch,
                p.last_sequence,
                p.last_timestamp,
                _none(p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None),
            ]
            for p in producers
        ],
    )


def format_hanging(hanging: Sequence[OpenTxn], now_ms: int) -> str:
    return format_table(
        [
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordinatorEpoch",
            "StartOffset",
            "LastTimestamp",
            "Duration(min)",
        ],
        [
            [
                t.tp.topic,
                t.tp.partition,
                t.producer.producer_id,
                t.producer.producer_epoch,
                t.producer.coordinator_epoch,
                t.producer.current_txn_start_offset,
                t.producer.last_timestamp,
                (now_ms - t.producer.last_timestamp) // 60_000,
            ]
            for t in hanging
        ],
    )


def description_to_json(d: TxnDescription, now_ms: int) -> dict[str, Any]:
    return {
        "coordinator": d.coordinator,
        "transactional_id": d.transactional_id,
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "state": d.state,
        "timeout_ms": d.timeout_ms,
        "start_time_ms": d.start_ms,
        "duration_ms": d.duration_ms(now_ms),
        "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in d.partitions],
    }


def producer_to_json(p: ProducerView) -> dict[str, Any]:
    return {
        "producer_id": p.producer_id,
        "producer_epoch": p.producer_epoch,
        "coordinator_epoch": p.coordinator_epoch,
        "last_sequence": p.last_sequence,
        "last_timestamp": p.last_timestamp,
        "current_txn_start_offset": (
            p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None
        ),
    }


def open_transactions(
    producers: Mapping[TopicPartition, Sequence[ProducerView]], now_ms: int, max_timeout_ms: int
) -> list[OpenTxn]:
    """find-hanging's candidates: open transactions whose producer wrote nothing to the
    partition for longer than ``max_timeout_ms`` (no transaction may run that long)."""
    return [
        OpenTxn(tp, p)
        for tp, ps in sorted(producers.items())
        for p in ps
        if p.current_txn_start_offset >= 0 and now_ms - p.last_timestamp > max_timeout_ms
    ]


def hanging_transactions(
    candidates: Sequence[OpenTxn],
    transactional_ids: Mapping[int, str],
    descriptions: Mapping[str, TxnDescription | None],
) -> list[OpenTxn]:
    """The candidates no coordinator will ever end: their producer id has no transactional
    id, the id is not found (None), or its transaction does not include the partition."""
    out = []
    for txn in candidates:
        txn_id = transactional_ids.get(txn.producer.producer_id)
        described = descriptions.get(txn_id) if txn_id is not None else None
        if described is None or txn.tp not in described.partitions:
            out.append(txn)
    return out


def transaction_starting_at(
    producers: Iterable[ProducerView], start_offset: int
) -> ProducerView | None:
    """The producer whose open transaction starts at ``start_offset``, or None."""
    for p in producers:
        if p.current_txn_start_offset >= 0 and p.current_txn_start_offset == start_offset:
            return p
    return None


def marker_coordinator_epoch(coordinator_epoch: int) -> int:
    """A producer that never got a marker shows -1; 0 is at or below every real one."""
    return max(0, coordinator_epoch)


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode._value2member_map_[int(value)]  # type: ignore[return-value]
    except KeyError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _error(code: ErrorCode, what: str, message: str | None = None) -> CommandError:
    detail = f"{what}: {message}" if message else what
    return CommandError(detail, code=code, hint=_HINTS.get(code))


def _request(api: ApiKey, version: int, data: Mapping[str, Any]) -> Any:
    return build(load_request_schema(api, version), data)


def _now_ms() -> int:
    return int(time.time() * 1000)


# --- requests ------------------------------------------------------------------------------


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
) -> tuple[list[TxnListing], list[str]]:
    """Every broker's transactions that pass the filters, and the state filters a broker
    did not know."""
    cluster = client.metadata(None)
    listings: list[TxnListing] = []
    unknown: set[str] = set()
    for node_id in sorted(cluster.brokers):
        version = _supported_version(client, node_id, ApiKey.LIST_TRANSACTIONS, 1)
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
        response = client.send(_request(ApiKey.LIST_TRANSACTIONS, version, data), node_id=node_id)
        if response.error_code != ErrorCode.NONE:
            raise _error(_code(response.error_code), f"broker {node_id}")
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
            raise _error(
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
            raise _error(code, f"transactional id '{transactional_id}'")
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
        raise _error(topic.error_code, f"partition {_tp(tp)}")
    if topic is None or tp.partition not in topic.partitions:
        raise _error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {_tp(tp)}")
    leader = cluster.leader_for(tp)
    if leader is None:
        raise _error(ErrorCode.LEADER_NOT_AVAILABLE, f"partition {_tp(tp)}")
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
                        raise _error(code, f"partition {_tp(tp)}", part.error_message)
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
        raise _error(code, f"topic '{topic}'")
    return [TopicPartition(topic, p) for p in sorted(info.partitions)]


def find_hanging(
    client: BlockingClient, tps: Sequence[TopicPartition], max_timeout_ms: int
) -> list[OpenTxn]:
    now = _now_ms()
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


# --- the command ---------------------------------------------------------------------------


def _int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}: {value}")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap_flags(parser)
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        # Also after the action, as `tidelog groups` takes them.
        p.add_argument("--bootstrap-server", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.add_argument("--dir", type=Path, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.add_argument(
            "--command-config", type=Path, default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
        add_json_flag(p)
        p.set_defaults(action_parser=p)
        return p

    listing = add("list", "every transaction of every coordinator (ListTransactions)")
    listing.add_argument(
        "--state",
        action="append",
        default=[],
        choices=STATE_NAMES,
        help="only transactions in this state (repeatable)",
    )
    listing.add_argument(
        "--producer-id",
        action="append",
        default=[],
        type=_int_at_least(0),
        help="only transactions of this producer id (repeatable)",
    )
    listing.add_argument(
        "--duration-filter",
        type=_int_at_least(0),
        metavar="MS",
        help="only transactions running for longer than MS milliseconds",
    )
    describe = add("describe", "the state of one transactional id (DescribeTransactions)")
    describe.add_argument("--transactional-id", required=True)
    producers = add("describe-producers", "the active producers of a partition (DescribeProducers)")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=_int_at_least(0), required=True)
    hanging = add("find-hanging", "open transactions that no coordinator will end (need `abort`)")
    hanging.add_argument(
        "--broker-id", type=_int_at_least(0), help="search the partitions with a replica here"
    )
    hanging.add_argument("--topic", help="search this topic's partitions")
    hanging.add_argument("--partition", type=_int_at_least(0), help="only this partition")
    hanging.add_argument(
        "--max-transaction-timeout",
        type=_int_at_least(0),
        default=DEFAULT_MAX_TXN_TIMEOUT_MIN,
        metavar="MINUTES",
        help="transactions idle for longer than this are suspect "
        f"(default {DEFAULT_MAX_TXN_TIMEOUT_MIN})",
    )
    abort = add("abort", "abort a hanging transaction in one partition (WriteTxnMarkers)")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=_int_at_least(0), required=True)
    which = abort.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--start-offset", type=_int_at_least(0), help="first offset of the transaction"
    )
    which.add_argument(
        "--producer-id",
        type=_int_at_least(0),
        help="its producer (then --producer-epoch and --coordinator-epoch too)",
    )
    abort.add_argument("--producer-epoch", type=_int_at_least(0, _MAX_EPOCH))
    abort.add_argument("--coordinator-epoch", type=_int_at_least(-1))


def _check(args: argparse.Namespace) -> None:
    """The argument rules argparse cannot express (errors exit 2, as argparse's)."""
    parser: argparse.ArgumentParser = args.action_parser
    if args.action == "find-hanging":
        if args.broker_id is None and args.topic is None:
            parser.error("find-hanging needs --broker-id or --topic to limit the search")
        if args.partition is not None and args.topic is None:
            parser.error("--partition needs --topic")
    if args.action == "abort":
        if args.producer_id is not None and (
            args.producer_epoch is None or args.coordinator_epoch is None
        ):
            parser.error("--producer-id needs --producer-epoch and --coordinator-epoch")
        if args.start_offset is not None and (
            args.producer_epoch is not None or args.coordinator_epoch is not None
        ):
            parser.error("--start-offset takes no --producer-epoch or --coordinator-epoch")


def run(args: argparse.Namespace) -> int:
    _check(args)
    bootstrap = resolve_bootstrap(args)
    with BlockingClient(
        bootstrap,
        client_id="tidelog-cli",
        request_timeout_s=REQUEST_TIMEOUT_S,
        security=resolve_security(args),
    ) as client:
        match args.action:
            case "list":
                return _list(client, args)
            case "describe":
                return _describe(client, args)
            case "describe-producers":
                return _describe_producers(client, args)
            case "find-hanging":
                return _find_hanging(client, args)
            case "abort":
                return _abort(client, args)
    raise AssertionError(args.action)


def _list(client: BlockingClient, args: argparse.Namespace) -> int:
    listings, unknown = list_transactions(
        client, args.state, args.producer_id, args.duration_filter
    )
    if unknown:
        print(f"warning: states unknown to the brokers: {', '.join(unknown)}", file=sys.stderr)
    if args.json:
        print_json(
            [
                {
                    "transactional_id": x.transactional_id,
                    "coordinator": x.coordinator,
                    "producer_id": x.producer_id,
                    "state": x.state,
                }
                for x in listings
            ]
        )
    else:
        print(format_listings(listings))
    return 0


def _describe(client: BlockingClient, args: argparse.Namespace) -> int:
    described = describe_transaction(client, args.transactional_id)
    now = _now_ms()
    if args.json:
        print_json(description_to_json(described, now))
    else:
        print(format_description(described, now))
    return 0


def _describe_producers(client: BlockingClient, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    producers = describe_producers(client, [tp])[tp]
    if args.json:
        print_json([producer_to_json(p) for p in producers])
    else:
        print(format_producers(producers))
    return 0


def _find_hanging(client: BlockingClient, args: argparse.Namespace) -> int:
    if args.topic is not None:
        tps = (
            [TopicPartition(args.topic, args.partition)]
            if args.partition is not None
            else partitions_of_topic(client, args.topic)
        )
        if args.broker_id is not None:
            on_broker = set(partitions_of_broker(client, args.broker_id))
            tps = [tp for tp in tps if tp in on_broker]
    else:
        tps = partitions_of_broker(client, args.broker_id)
    hanging = find_hanging(client, tps, args.max_transaction_timeout * 60_000)
    now = _now_ms()
    if args.json:
        print_json(
            [
                {"topic": t.tp.topic, "partition": t.tp.partition, **producer_to_json(t.producer)}
                for t in hanging
            ]
        )
    else:
        print(format_hanging(hanging, now))
    return 0


def _abort(client: BlockingClient, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is not None:
        producers = describe_producers(client, [tp])[tp]
        found = transaction_starting_at(producers, args.start_offset)
        if found is None:
            raise CommandError(
                f"no open transaction starts at offset {args.start_offset} in {_tp(tp)}",
                hint=f"see `tidelog transactions describe-producers --topic {tp.topic} "
                f"--partition {tp.partition}`",
            )
        producer_id, epoch, coordinator_epoch = (
            found.producer_id,
            found.producer_epoch,
            found.coordinator_epoch,
        )
    else:
        producer_id, epoch, coordinator_epoch = (
            args.producer_id,
            args.producer_epoch,
            args.coordinator_epoch,
        )
    error = abort_transaction(client, tp, producer_id, epoch, coordinator_epoch)
    if error != ErrorCode.NONE:
        raise _error(error, f"aborting producer {producer_id} (epoch {epoch}) in {_tp(tp)}")
    result = {
        "topic": tp.topic,
        "partition": tp.partition,
        "producer_id": producer_id,
        "producer_epoch": epoch,
        "coordinator_epoch": marker_coordinator_epoch(coordinator_epoch),
        "start_offset": args.start_offset,
    }
    if args.json:
        print_json(result)
    else:
        start = f" (started at offset {args.start_offset})" if args.start_offset is not None else ""
        print(
            f"Aborted the transaction of producer {producer_id} (epoch {epoch}) "
            f"in {_tp(tp)}{start}."
        )
    return 0


COMMANDS["transactions"] = (
    "list, describe and abort transactions; describe the producers of a partition",
    add_arguments,
    run,
)
