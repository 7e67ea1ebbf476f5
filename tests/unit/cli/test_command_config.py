"""``--command-config FILE`` and ``<dir>/client.properties``: Java properties -> the
``ClientSecurity`` every broker-talking command hands its ``BlockingClient``; bad files and
properties are one-line usage errors (exit 2) naming the key, never a secret."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from tidelog.cli import consume, groups, output, produce, topics, transactions
from tidelog.cli.main import build_parser, main
from tidelog.cli.output import (
    UsageError,
    parse_java_properties,
    read_properties_file,
    resolve_security,
)
from tidelog.client.errors import AuthenticationFailedError, NoCompatibleVersionError
from tidelog.security.client_config import PLAINTEXT

SCRAM_PROPS = """\
# the admin's login
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-256
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="admin" password="admin-secret";
client.id = ignored
"""


def _args(**kwargs: Any) -> argparse.Namespace:
    values: dict[str, Any] = {"bootstrap_server": None, "dir": Path(".tidelog")}
    values["command_config"] = None
    values.update(kwargs)
    return argparse.Namespace(**values)


# --- the properties format -------------------------------------------------------------------


def test_java_properties_separators_comments_and_continuations() -> None:
    text = (
        "# comment\n"
        "! also a comment\n"
        "\n"
        "a=1\n"
        "b : 2\n"
        "c 3\n"
        "  d=  spaced value  \n"
        "e=first \\\n"
        "    second\n"
        "f=\n"
        "g\n"
        "h=ends with two backslashes\\\\\n"
        "i=x=y:z\n"
    )
    assert parse_java_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "spaced value  ",
        "e": "first second",
        "f": "",
        "g": "",
        "h": "ends with two backslashes\\",
        "i": "x=y:z",
    }


def test_java_properties_escapes() -> None:
    text = "key\\=with\\:odd\\ chars=v\nt=a\\tb\\nc\nu=caf\\u00e9\nother=\\q\n"
    assert parse_java_properties(text) == {
        "key=with:odd chars": "v",
        "t": "a\tb\nc",
        "u": "café",
        "other": "q",
    }


def test_java_properties_bad_unicode_escape_names_the_line_not_the_text() -> None:
    with pytest.raises(ValueError, match=r"^line 2: malformed \\uxxxx escape$"):
        parse_java_properties("a=1\nsasl.password=se\\u12cret\n")


def test_properties_file_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^--command-config x: no such file$"):
        read_properties_file(tmp_path / "missing", "--command-config x")
    with pytest.raises(UsageError, match="is a directory"):
        read_properties_file(tmp_path, "--command-config x")
    latin = tmp_path / "latin.properties"
    latin.write_bytes("sasl.username=jos\xe9\n".encode("latin-1"))
    assert read_properties_file(latin, "f") == {"sasl.username": "josé"}
    bad = tmp_path / "bad.properties"
    bad.write_text("sasl.password=\\uZZZZ\n")
    with pytest.raises(UsageError) as info:
        read_properties_file(bad, "--command-config bad")
    assert info.value.exit_code == 2
    assert "ZZZZ" not in info.value.message


# --- properties -> ClientSecurity ------------------------------------------------------------


def test_no_file_is_plaintext(tmp_path: Path) -> None:
    assert resolve_security(_args(dir=tmp_path)) is PLAINTEXT


def test_command_config_scram_via_jaas(tmp_path: Path) -> None:
    path = tmp_path / "admin.properties"
    path.write_text(SCRAM_PROPS)
    security = resolve_security(_args(command_config=path, bootstrap_server="h:1"))
    assert security.protocol == "SASL_PLAINTEXT"
    assert security.sasl_mechanism == "SCRAM-SHA-256"
    assert security.sasl_username == "admin"
    assert security.sasl_password == "admin-secret"
    assert "admin-secret" not in repr(security)


def test_command_config_username_password_keys(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text(
        "security.protocol=sasl_plaintext\nsasl.mechanism=PLAIN\n"
        "sasl.username=alice\nsasl.password=alice-secret\n"
    )
    security = resolve_security(_args(command_config=path))
    assert (security.protocol, security.sasl_mechanism, security.sasl_username) == (
        "SASL_PLAINTEXT",
        "PLAIN",
        "alice",
    )


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("security.protocol=TLS\n", "security.protocol"),
        ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n", "sasl.mechanism"),
        ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n", "sasl.username"),
        (
            "security.protocol=SASL_PLAINTEXT\nsasl.jaas.config=Login required "
            'username="a" password="pw-secret"\n',
            "sasl.jaas.config",
        ),
        (
            "security.protocol=SSL\nssl.truststore.location=/no/such/ca.pem\n",
            "ssl.truststore.location",
        ),
    ],
)
def test_bad_property_is_a_usage_error_naming_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "bad.properties"
    path.write_text(text)
    with pytest.raises(UsageError) as info:
        resolve_security(_args(command_config=path))
    message = info.value.message
    assert message.startswith(f"--command-config {path}: {key}: ")
    assert "\n" not in message
    assert "pw-secret" not in message
    assert info.value.exit_code == 2


def test_local_cluster_client_properties_is_the_default(tmp_path: Path) -> None:
    (tmp_path / output.CLIENT_PROPERTIES).write_text(SCRAM_PROPS)
    security = resolve_security(_args(dir=tmp_path))
    assert security.sasl_username == "admin"
    # --bootstrap-server names another cluster: the local login is not used.
    assert resolve_security(_args(dir=tmp_path, bootstrap_server="h:1")) is PLAINTEXT
    # --command-config wins over the local file.
    other = tmp_path / "other.properties"
    other.write_text("security.protocol=PLAINTEXT\n")
    assert resolve_security(_args(dir=tmp_path, command_config=other)).protocol == "PLAINTEXT"


def test_bad_local_client_properties_names_the_file(tmp_path: Path) -> None:
    (tmp_path / output.CLIENT_PROPERTIES).write_text("security.protocol=nope\n")
    with pytest.raises(UsageError, match=r"client\.properties \(the local cluster's client"):
        resolve_security(_args(dir=tmp_path))


# --- every broker-talking command ------------------------------------------------------------

COMMAND_LINES = [
    ["topics", "list"],
    ["topics", "describe"],
    ["topics", "create", "--topic", "t"],
    ["topics", "alter", "--topic", "t", "--partitions", "2"],
    ["topics", "delete", "--topic", "t"],
    ["elect-leaders", "--preferred"],
    ["produce", "--topic", "t"],
    ["consume", "--topic", "t"],
    ["groups", "list"],
    ["transactions", "list"],
    ["acls", "list"],
    ["users", "list"],
]


@pytest.mark.parametrize("argv", COMMAND_LINES, ids=lambda a: " ".join(a[:2]))
def test_every_broker_command_takes_command_config(argv: list[str]) -> None:
    args = build_parser().parse_args([*argv, "--command-config", "c.properties"])
    assert args.command_config == Path("c.properties")


class BuiltError(Exception):
    """Raised by the fake BlockingClient once it has seen its arguments."""


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        (topics, ["topics", "list"]),
        (topics, ["elect-leaders", "--preferred"]),
        (produce, ["produce", "--topic", "t"]),
        (consume, ["consume", "--topic", "t"]),
        (groups, ["groups", "list"]),
        (transactions, ["transactions", "list"]),
    ],
    ids=lambda v: v if isinstance(v, str) else " ".join(v[:2]) if isinstance(v, list) else "",
)
def test_security_reaches_the_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: Any, argv: list[str]
) -> None:
    path = tmp_path / "admin.properties"
    path.write_text(SCRAM_PROPS)
    seen: dict[str, Any] = {}

    def fake(bootstrap: str, **kwargs: Any) -> Any:
        seen.update(kwargs, bootstrap=bootstrap)
        raise BuiltError

    monkeypatch.setattr(module, "BlockingClient", fake)
    with pytest.raises(BuiltError):
        main([*argv, "--bootstrap-server", "h:9092", "--command-config", str(path)])
    assert seen["bootstrap"] == "h:9092"
    assert seen["security"].sasl_username == "admin"


def test_bad_command_config_exits_2_before_connecting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(topics, "BlockingClient", pytest.fail)
    code = main(
        [
            "topics",
            "list",
            "--bootstrap-server",
            "h:1",
            "--command-config",
            str(tmp_path / "missing.properties"),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"tidelog topics: error: --command-config {tmp_path / 'missing.properties'}: no such file"
    )


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (
            AuthenticationFailedError("Authentication failed: invalid credentials"),
            "tidelog topics: error: authentication failed: Authentication failed: invalid "
            "credentials\nhint: check security.protocol",
        ),
        (
            NoCompatibleVersionError("h:1 does not support CREATE_ACLS"),
            "tidelog topics: error: UNSUPPORTED_VERSION: h:1 does not support CREATE_ACLS",
        ),
    ],
)
def test_authentication_and_version_failures_exit_1(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    exc: Exception,
    expected: str,
) -> None:
    def fake(bootstrap: str, **kwargs: Any) -> Any:
        raise exc

    monkeypatch.setattr(topics, "BlockingClient", fake)
    assert main(["topics", "list", "--bootstrap-server", "h:1"]) == 1
    assert capsys.readouterr().err.startswith(expected)
