"""``tidelog configs --entity-type users|clients``: kafka-configs.sh's ordered entity flags,
the quota ops, the entity words, and the usage errors raised before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest

from tidelog.cli.client_quotas import entity_spec, entity_text, quota_ops
from tidelog.cli.configs import run
from tidelog.cli.main import build_parser
from tidelog.cli.output import UsageError
from tidelog.client import quota_admin as qa


def parse(*argv: str) -> Any:
    return build_parser().parse_args(["configs", *argv])


def test_flags_pair_in_order_users_first() -> None:
    args = parse(
        "alter", "--entity-type", "clients", "--entity-default",
        "--entity-type", "users", "--entity-name", "alice", "--add-config", "a=1",
    )  # fmt: skip
    assert entity_spec(args.entity_flags) == [
        ("users", "alice", False),
        ("clients", None, True),
    ]
    # The topics/brokers forms read as before.
    args = parse("describe", "--entity-type", "brokers", "--entity-name", "2")
    assert (args.entity_type, args.entity_name, args.entity_default) == ("brokers", "2", False)
    args = parse("describe", "--entity-type", "brokers", "--entity-default")
    assert (args.entity_type, args.entity_name, args.entity_default) == ("brokers", None, True)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("--entity-type", "users", "--entity-type", "users"),
            "each --entity-type may be given once",
        ),
        (
            ("--entity-type", "users", "--entity-type", "topics"),
            "two entity types must be users and clients",
        ),
        (
            ("--entity-type", "users", "--entity-name", "a", "--entity-default"),
            "--entity-default must follow an --entity-type",
        ),
    ],
)
def test_bad_entity_flags(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        entity_spec(parse("describe", *argv).entity_flags)


def test_usage_errors_before_anything_is_sent() -> None:
    with pytest.raises(UsageError, match="alter needs --add-config and/or --delete-config"):
        run(parse("alter", "--entity-type", "users", "--entity-name", "a"))
    with pytest.raises(UsageError, match="x: 'y' is not a number"):
        run(parse("alter", "--entity-type", "users", "--entity-name", "a", "--add-config", "x=y"))
    with pytest.raises(UsageError, match="--entity-name NAME or --entity-default"):
        run(parse("alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1",
                  "--bootstrap-server", "127.0.0.1:1"))  # fmt: skip


def test_quota_ops_and_entity_words() -> None:
    assert quota_ops({"producer_byte_rate": "1024"}, ["request_percentage"]) == [
        qa.QuotaOp("producer_byte_rate", 1024.0),
        qa.QuotaOp("request_percentage", None),
    ]
    assert entity_text((("user", "alice"), ("client-id", None))) == (
        "user-principal 'alice', the default client-id"
    )
