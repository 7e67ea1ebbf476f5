"""``tidelog configs``: kafka-configs.sh's --add-config list, its output lines, and the
usage errors raised before anything is sent."""

from __future__ import annotations

import pytest

from tidelog.cli.configs import (
    alter_ops,
    format_entry,
    heading,
    parse_add_config,
    parse_delete_config,
    shown,
)
from tidelog.cli.main import build_parser
from tidelog.cli.output import UsageError
from tidelog.client import config_admin as ca
from tidelog.errors import ErrorCode


def test_add_config_list() -> None:
    assert parse_add_config("retention.ms=1000, cleanup.policy=[delete,compact],x=a=b") == {
        "retention.ms": "1000",
        "cleanup.policy": "delete,compact",
        "x": "a=b",
    }
    assert parse_add_config("") == {}
    with pytest.raises(UsageError, match="'oops' is not KEY=VALUE"):
        parse_add_config("a=1,oops")
    assert parse_delete_config("a, b,,c") == ["a", "b", "c"]


def parse(*argv: str) -> object:
    return build_parser().parse_args(["configs", *argv])


def test_alter_ops_and_usage_errors() -> None:
    args = parse(
        "alter", "--entity-type", "brokers", "--entity-default",
        "--add-config", "log.retention.ms=1", "--delete-config", "message.max.bytes",
    )  # fmt: skip
    assert alter_ops(args, "") == [  # type: ignore[arg-type]
        ca.AlterOp("log.retention.ms", ca.SET, "1"),
        ca.AlterOp("message.max.bytes", ca.DELETE),
    ]
    nothing = parse("alter", "--entity-type", "topics", "--entity-name", "t")
    with pytest.raises(UsageError, match="--add-config and/or --delete-config"):
        alter_ops(nothing, "t")  # type: ignore[arg-type]
    both = parse(
        "alter", "--entity-type", "topics", "--entity-name", "t",
        "--add-config", "a=1", "--delete-config", "a",
    )  # fmt: skip
    with pytest.raises(UsageError, match="a both added and deleted"):
        alter_ops(both, "t")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="--entity-name NAME or --entity-default"):
        alter_ops(nothing, None)  # type: ignore[arg-type]


def test_output_lines() -> None:
    secret = ca.ConfigEntry(
        "ssl.key.password", None, "STATIC_BROKER_CONFIG", True, True, "PASSWORD",
        synonyms=(ca.ConfigSynonym("ssl.key.password", None, "STATIC_BROKER_CONFIG"),),
    )  # fmt: skip
    assert format_entry(secret) == (
        "  ssl.key.password=null sensitive=true "
        "synonyms={STATIC_BROKER_CONFIG:ssl.key.password=null}"
    )
    retention = ca.ConfigEntry(
        "retention.ms", "1000", "DYNAMIC_TOPIC_CONFIG", False, False, "LONG",
        synonyms=(
            ca.ConfigSynonym("retention.ms", "1000", "DYNAMIC_TOPIC_CONFIG"),
            ca.ConfigSynonym("log.retention.hours", "168", "DEFAULT_CONFIG"),
        ),
    )  # fmt: skip
    assert format_entry(retention) == (
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, "
        "DEFAULT_CONFIG:log.retention.hours=168}"
    )
    resource = ca.ResourceConfigs(ca.TOPIC, "t", ErrorCode.NONE, None, (secret, retention))
    assert shown(resource, False) == [retention]
    assert shown(resource, True) == [secret, retention]
    assert heading(resource, False) == "Dynamic configs for topic t are:"
    broker = ca.ResourceConfigs(ca.BROKER, "1", ErrorCode.NONE, None)
    assert heading(broker, True) == "All configs for broker 1 are:"
    default = ca.ResourceConfigs(ca.BROKER, "", ErrorCode.NONE, None)
    assert heading(default, False) == "Default configs for brokers in the cluster are:"


def test_entity_default_is_for_brokers_only(capsys: pytest.CaptureFixture[str]) -> None:
    from tidelog.cli.main import main

    code = main(
        ["configs", "describe", "--entity-type", "topics", "--entity-default",
         "--bootstrap-server", "127.0.0.1:1"]
    )  # fmt: skip
    assert code == 2
    assert "--entity-default applies to --entity-type brokers only" in capsys.readouterr().err


def test_describe_request_routes_and_reads() -> None:
    request = ca.describe_configs_request([(ca.BROKER, "1")], synonyms=True, documentation=True)
    assert request.include_synonyms
    assert request.include_documentation
    assert request.resources[0].configuration_keys is None
    alter = ca.incremental_alter_request(ca.TOPIC, "t", [ca.AlterOp("a", ca.SUBTRACT, "x")])
    assert alter.resources[0].configs[0].config_operation == ca.SUBTRACT
