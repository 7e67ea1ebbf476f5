"""``tidelog users`` without a cluster: options and their messages, where the password comes
from, and whole commands against a fake broker that decodes AlterUserScramCredentials /
DescribeUserScramCredentials from the wire: the password itself never travels, never
shows in output, errors or reprs."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_response_schema

from tidelog.cli import users
from tidelog.cli.main import build_parser, main
from tidelog.cli.output import UsageError
from tidelog.client import security_admin as sa
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from tidelog.protocol.messages import build
from tidelog.security.scram import (
    ScramCredential,
    ScramMechanism,
    credential_from_salted_password,
    make_credential,
    salted_password,
)

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512
SECRET = "alice-secret-pw"


# --- arguments ---------------------------------------------------------------------------------


def test_mechanisms_and_iterations_parse() -> None:
    args = build_parser().parse_args(
        [
            "users",
            "add",
            "alice",
            "--mechanism",
            "scram-sha-512",
            "--mechanism",
            "SCRAM-SHA-256",
            "--iterations",
            "8192",
        ]
    )
    assert users.mechanisms(args) == [SHA512, SHA256]
    assert args.iterations == 8192
    default = build_parser().parse_args(["users", "add", "bob"])
    assert (users.mechanisms(default), default.iterations) == ([SHA256], 4096)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["add", "a", "--mechanism", "PLAIN"],
            "argument --mechanism: 'PLAIN' is not a SCRAM mechanism: use SCRAM-SHA-256 or "
            "SCRAM-SHA-512",
        ),
        (
            ["add", "a", "--iterations", "100"],
            "argument --iterations: 100 is outside 4096-16384 (Kafka's SCRAM limits)",
        ),
        (["add", "a", "--iterations", "20000"], "20000 is outside 4096-16384"),
        (["add", "a", "--iterations", "many"], "'many' is not an integer"),
        (["add", ""], "the user name is empty"),
        (
            ["add", "a", "--password", "x", "--password-file", "f"],
            "not allowed with argument",
        ),
        (["remove", "a", "--mechanism", "sha"], "'sha' is not a SCRAM mechanism"),
    ],
)
def test_bad_arguments_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["users", *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


# --- the password ------------------------------------------------------------------------------


def test_password_file(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text(SECRET + "\n")
    assert users.read_password_file(str(path)) == SECRET
    path.write_bytes(b"with trailing space \r\n")
    assert users.read_password_file(str(path)) == "with trailing space "
    path.write_text("two lines\n\n")
    assert users.read_password_file(str(path)) == "two lines\n"


def test_password_file_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^--password-file .*missing: no such file$"):
        users.read_password_file(str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(UsageError, match="the password is empty"):
        users.read_password_file(str(empty))
    with pytest.raises(UsageError, match="cannot read it"):
        users.read_password_file(str(tmp_path))
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(UsageError, match="not UTF-8 text"):
        users.read_password_file(str(binary))


def test_password_from_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(SECRET + "\n"))
    assert users.read_password_file("-") == SECRET


def test_password_option_warns(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["users", "add", "alice", "--password", SECRET])
    assert users.password_of(args) == SECRET
    err = capsys.readouterr().err
    assert err == users.PASSWORD_WARNING + "\n"
    assert SECRET not in err


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_prompt_asks_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([SECRET, SECRET])
    prompts: list[str] = []

    def fake_getpass(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    monkeypatch.setattr("sys.stdin", _Tty())
    monkeypatch.setattr("getpass.getpass", fake_getpass)
    args = build_parser().parse_args(["users", "add", "alice"])
    assert users.password_of(args) == SECRET
    assert prompts == ["Password for user alice: ", "Type it again: "]


def test_prompt_mismatch_and_no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter([SECRET, "other"])
    monkeypatch.setattr("sys.stdin", _Tty())
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(answers))
    with pytest.raises(UsageError, match=r"^the passwords do not match$"):
        users.prompt_password("alice")
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(UsageError, match="standard input is not a terminal") as info:
        users.prompt_password("alice")
    assert info.value.hint is not None
    assert "--password-file" in info.value.hint


# --- requests ------------------------------------------------------------------------------------


def test_upsertion_carries_salt_and_salted_password_never_the_password() -> None:
    upsertion = sa.ScramUpsertion("alice", SHA512, SECRET, iterations=8192, salt=b"s" * 16)
    assert SECRET not in repr(upsertion)
    body = sa.alter_scram_request([upsertion], [sa.ScramDeletion("bob", SHA256)])
    frame = encode_request(RequestHeader(51, 0, 1, "t"), body)
    assert SECRET.encode() not in frame
    _h, decoded = decode_request(frame[4:], {ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0)})
    (up,) = decoded.upsertions
    assert (up.name, up.mechanism, up.iterations, up.salt) == ("alice", 2, 8192, b"s" * 16)
    assert up.salted_password == salted_password(SHA512, SECRET, b"s" * 16, 8192)
    (gone,) = decoded.deletions
    assert (gone.name, gone.mechanism) == ("bob", 1)


def test_fresh_salt_each_time() -> None:
    upsertion = sa.ScramUpsertion("alice", SHA256, SECRET)
    first = sa.alter_scram_request([upsertion], []).upsertions[0].salt
    second = sa.alter_scram_request([upsertion], []).upsertions[0].salt
    assert first != second
    assert len(first) >= 16


def test_describe_request_null_means_every_user() -> None:
    assert sa.describe_scram_request(None).users is None
    assert sa.describe_scram_request([]).users is None
    assert [u.name for u in sa.describe_scram_request(["a", "b"]).users] == ["a", "b"]


# --- whole commands against a fake broker ------------------------------------------------------


class FakeBroker:
    """Keeps SCRAM credentials as Kafka's broker does (derived from the salted password)."""

    def __init__(self) -> None:
        self.api_versions = {
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
        }
        self.credentials: dict[str, dict[ScramMechanism, ScramCredential]] = {}
        self.refuse: tuple[ErrorCode, str] | None = None
        self.address = "fake:9092"
        self.frames: list[bytes] = []

    def pick_version(self, api_key: ApiKey, preferred: tuple[int, ...]) -> int | None:
        low, high = self.api_versions.get(api_key, (0, -1))
        return next((v for v in preferred if low <= v <= high), None)

    async def send(self, body: Any, *, timeout_s: float | None = None) -> Any:
        api_key = ApiKey(int(body.__api_key__))
        header = RequestHeader(int(api_key), 0, 1, "test")
        frame = encode_request(header, body)
        self.frames.append(frame)
        _h, request = decode_request(frame[4:], self.api_versions)
        data = self.answer(api_key, request)
        response = build(load_response_schema(api_key, 0), data)
        return decode_response(int(api_key), 0, encode_response(header, response)[4:])[1]

    def answer(self, api_key: ApiKey, request: Any) -> dict[str, Any]:
        if api_key == ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS:
            if self.refuse:
                return {"error_code": int(self.refuse[0]), "error_message": self.refuse[1]}
            names = [u.name for u in request.users] if request.users else sorted(self.credentials)
            results = []
            for name in names:
                creds = self.credentials.get(name)
                if not creds:
                    results.append(
                        {
                            "user": name,
                            "error_code": int(ErrorCode.RESOURCE_NOT_FOUND),
                            "error_message": "Attempt to describe a user credential that does "
                            f"not exist: {name}",
                        }
                    )
                    continue
                infos = [
                    {"mechanism": m.type_id, "iterations": c.iterations}
                    for m, c in sorted(creds.items(), key=lambda kv: kv[0].type_id)
                ]
                results.append({"user": name, "error_code": 0, "credential_infos": infos})
            return {"error_code": 0, "results": results}
        outcome: dict[str, dict[str, Any]] = {}
        for d in request.deletions:
            mechanism = ScramMechanism.from_type(d.mechanism)
            assert mechanism is not None
            if self.refuse:
                outcome[d.name] = {
                    "error_code": int(self.refuse[0]),
                    "error_message": self.refuse[1],
                }
            elif mechanism not in self.credentials.get(d.name, {}):
                outcome[d.name] = {
                    "error_code": int(ErrorCode.RESOURCE_NOT_FOUND),
                    "error_message": "Attempt to delete a user credential that does not exist",
                }
            else:
                del self.credentials[d.name][mechanism]
                outcome.setdefault(d.name, {"error_code": 0})
        for u in request.upsertions:
            mechanism = ScramMechanism.from_type(u.mechanism)
            assert mechanism is not None
            if self.refuse:
                outcome[u.name] = {
                    "error_code": int(self.refuse[0]),
                    "error_message": self.refuse[1],
                }
                continue
            self.credentials.setdefault(u.name, {})[mechanism] = credential_from_salted_password(
                mechanism, u.salt, u.salted_password, u.iterations
            )
            outcome.setdefault(u.name, {"error_code": 0})
        return {"results": [{"user": name, **r} for name, r in outcome.items()]}


class FakeClient:
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker

    async def connection(self, node_id: int | None = None) -> FakeBroker:
        return self.broker


class FakeBlockingClient:
    def __init__(self, broker: FakeBroker) -> None:
        self.client = FakeClient(broker)

    def __enter__(self) -> FakeBlockingClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def run(self, coro: Any) -> Any:
        return asyncio.run(coro)


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> FakeBroker:
    fake = FakeBroker()
    monkeypatch.setattr(users, "BlockingClient", lambda bootstrap, **kw: FakeBlockingClient(fake))
    return fake


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], broker: FakeBroker) -> Run:
    def go(*argv: str) -> tuple[int, str, str]:
        code = main(["users", *argv, "--bootstrap-server", "fake:9092"])
        out, err = capsys.readouterr()
        assert SECRET not in out + err
        return code, out, err

    return go


@pytest.fixture
def password_file(tmp_path: Path) -> str:
    path = tmp_path / "alice.pw"
    path.write_text(SECRET + "\n")
    return str(path)


def test_add_list_remove(run: Run, broker: FakeBroker, password_file: str) -> None:
    code, out, err = run(
        "add", "alice", "--password-file", password_file, "--mechanism", "SCRAM-SHA-512"
    )
    assert (code, err) == (0, "")
    assert out == (
        "Completed updating SCRAM credentials for user alice: SCRAM-SHA-512=[iterations=4096].\n"
    )
    stored = broker.credentials["alice"][SHA512]
    assert stored == make_credential(SHA512, SECRET, iterations=4096, salt=stored.salt)
    assert all(SECRET.encode() not in frame for frame in broker.frames)

    run("add", "bob", "--password", "bob-pw", "--iterations", "8192")
    run("add", "alice", "--password-file", password_file)
    code, out, _ = run("list")
    assert code == 0
    assert out.splitlines() == [
        "USER   MECHANISM      ITERATIONS",
        "alice  SCRAM-SHA-256  4096",
        "alice  SCRAM-SHA-512  4096",
        "bob    SCRAM-SHA-256  8192",
    ]
    code, out, _ = run("list", "bob", "--json")
    assert json.loads(out) == [{"user": "bob", "mechanism": "SCRAM-SHA-256", "iterations": 8192}]

    code, out, _ = run("remove", "alice", "--mechanism", "scram-sha-256")
    assert out == "Completed deleting SCRAM credentials for user alice: SCRAM-SHA-256.\n"
    assert set(broker.credentials["alice"]) == {SHA512}
    code, out, _ = run("remove", "bob", "--json")
    assert json.loads(out) == {"user": "bob", "removed": ["SCRAM-SHA-256"]}
    assert broker.credentials["bob"] == {}


def test_add_json(run: Run, password_file: str) -> None:
    _code, out, _ = run(
        "add",
        "carol",
        "--json",
        "--password-file",
        password_file,
        "--mechanism",
        "SCRAM-SHA-256",
        "--mechanism",
        "SCRAM-SHA-512",
    )
    assert json.loads(out) == {
        "user": "carol",
        "added": [
            {"mechanism": "SCRAM-SHA-256", "iterations": 4096},
            {"mechanism": "SCRAM-SHA-512", "iterations": 4096},
        ],
    }


def test_list_unknown_user_prints_the_known_then_fails(run: Run, password_file: str) -> None:
    run("add", "alice", "--password-file", password_file)
    code, out, err = run("list", "alice", "nobody")
    assert code == 1
    assert out.splitlines()[1:] == ["alice  SCRAM-SHA-256  4096"]
    assert err.startswith(
        "tidelog users: error: RESOURCE_NOT_FOUND: user nobody: Attempt to describe a user "
        "credential that does not exist: nobody"
    )


def test_remove_unknown(run: Run) -> None:
    code, _out, err = run("remove", "nobody")
    assert code == 1
    assert "RESOURCE_NOT_FOUND: user nobody: Attempt to describe a user credential" in err
    code, _out, err = run("remove", "nobody", "--mechanism", "SCRAM-SHA-512")
    assert code == 1
    assert err.startswith(
        "tidelog users: error: RESOURCE_NOT_FOUND: user nobody: Attempt to delete a user "
        "credential that does not exist"
    )


@pytest.mark.parametrize(
    "argv", [["list"], ["add", "alice"], ["remove", "alice", "--mechanism", "SCRAM-SHA-256"]]
)
def test_cluster_authorization_failed(
    run: Run, broker: FakeBroker, password_file: str, argv: list[str]
) -> None:
    broker.refuse = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    extra = ["--password-file", password_file] if argv[0] == "add" else []
    code, out, err = run(*argv, *extra)
    assert code == 1
    assert out == ""
    assert "CLUSTER_AUTHORIZATION_FAILED: " in err
    assert "Cluster authorization failed." in err
    assert "hint: the principal of --command-config needs an ACL on the cluster" in err


def test_no_password_without_terminal_sends_nothing(
    run: Run, broker: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, _out, err = run("add", "alice")
    assert code == 2
    assert "no password given and standard input is not a terminal" in err
    assert broker.frames == []
