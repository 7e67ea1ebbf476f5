"""``tidelog transactions``: transactions and the producers of partitions, as
kafka-transactions.sh shows them (KIP-664), and aborting a hanging transaction.

- ``list [--state S]... [--producer-id N]... [--duration-filter MS]
  [--transactional-id-pattern RE]``: ListTransactions on every broker (each coordinates
  its own share of the transactional ids), merged into one table: TransactionalId,
  Coordinator, ProducerId, TransactionState. An invalid pattern is the brokers'
  INVALID_REGULAR_EXPRESSION (exit 1).
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

This module holds the command; its requests are :mod:`tidelog.cli.transactions_requests`,
what it prints and decides without a broker :mod:`tidelog.cli.transactions_views`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from tidelog.cli.main import COMMANDS
from tidelog.cli.output import (
    CommandError,
    add_bootstrap_flags,
    add_json_flag,
    print_json,
    resolve_bootstrap,
    resolve_security,
)
from tidelog.cli.transactions_requests import (
    abort_transaction,
    command_error,
    describe_producers,
    describe_transaction,
    find_hanging,
    list_transactions,
    now_ms,
    partitions_of_broker,
    partitions_of_topic,
)
from tidelog.cli.transactions_views import (
    description_to_json,
    format_description,
    format_hanging,
    format_listings,
    format_producers,
    marker_coordinator_epoch,
    producer_to_json,
    tp_text,
    transaction_starting_at,
)
from tidelog.client import BlockingClient
from tidelog.coordinator.txn import TxnState
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

#: Kafka's default for find-hanging's ``--max-transaction-timeout`` (minutes).
DEFAULT_MAX_TXN_TIMEOUT_MIN: Final = 15
REQUEST_TIMEOUT_S: Final = 30.0
_MAX_EPOCH: Final = 32767
#: Kafka's transaction state names (``--state`` takes these).
STATE_NAMES: Final = tuple(state.value for state in TxnState)


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
    listing.add_argument(
        "--transactional-id-pattern",
        metavar="RE",
        help="only transactional ids this regular expression matches whole (KIP-1152)",
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
        client,
        args.state,
        args.producer_id,
        args.duration_filter,
        args.transactional_id_pattern,
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
    now = now_ms()
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
    now = now_ms()
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
                f"no open transaction starts at offset {args.start_offset} in {tp_text(tp)}",
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
        raise command_error(
            error, f"aborting producer {producer_id} (epoch {epoch}) in {tp_text(tp)}"
        )
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
            f"in {tp_text(tp)}{start}."
        )
    return 0


COMMANDS["transactions"] = (
    "list, describe and abort transactions; describe the producers of a partition",
    add_arguments,
    run,
)
