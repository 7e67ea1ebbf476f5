"""SASL PLAIN and JAAS config strings (tidelog.security.plain)."""

from __future__ import annotations

import pytest

from tidelog.security.errors import AuthenticationError, SecurityConfigError
from tidelog.security.plain import (
    AUTHZID_MISMATCH_MESSAGE,
    INVALID_CREDENTIALS_MESSAGE,
    PLAIN_LOGIN_MODULE,
    JaasConfig,
    PlainMessage,
    authenticate,
    parse_jaas_config,
    passwords_equal,
    plain_users,
)

USERS = {"admin": "admin-secret", "alice": "alice-secret"}

KAFKA_EXAMPLE = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" '
    'user_alice="alice-secret";'
)


# -- messages -------------------------------------------------------------------------------------


def test_message_round_trip() -> None:
    message = PlainMessage("", "alice", "alice-secret")
    assert message.encode() == b"\0alice\0alice-secret"
    assert PlainMessage.parse(message.encode()) == message
    assert "secret" not in repr(message)


def test_authenticate_ok_with_and_without_authzid() -> None:
    assert authenticate(b"\0alice\0alice-secret", USERS) == "alice"
    assert authenticate(b"alice\0alice\0alice-secret", USERS) == "alice"
    # Passwords are UTF-8.
    assert authenticate("\0bob\0pässwörd".encode(), {"bob": "pässwörd"}) == "bob"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\0alice\0wrong", INVALID_CREDENTIALS_MESSAGE),
        (b"\0mallory\0alice-secret", INVALID_CREDENTIALS_MESSAGE),
        (b"\0alice\0alice-secretX", INVALID_CREDENTIALS_MESSAGE),
        (b"admin\0alice\0alice-secret", AUTHZID_MISMATCH_MESSAGE),
        (b"\0\0alice-secret", "Authentication failed: username not specified"),
        (b"\0alice\0", "Authentication failed: password not specified"),
        (b"alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (b"\0alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"\0alice\0a\0b", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\0alice\0a\0b\0c", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
    ],
)
def test_authenticate_refusals_carry_kafkas_message(token: bytes, message: str) -> None:
    with pytest.raises(AuthenticationError) as info:
        authenticate(token, USERS)
    assert str(info.value) == message


def test_wrong_password_and_unknown_user_are_indistinguishable() -> None:
    answers = set()
    for token in (b"\0alice\0nope", b"\0nobody\0nope"):
        with pytest.raises(AuthenticationError) as info:
            authenticate(token, USERS)
        answers.add(str(info.value))
    assert answers == {"Authentication failed: Invalid username or password"}


def test_passwords_equal() -> None:
    assert passwords_equal("a-secret", "a-secret")
    assert not passwords_equal("a-secret", "a-secreT")
    assert not passwords_equal("", "x")


# -- JAAS -----------------------------------------------------------------------------------------


def test_kafkas_example() -> None:
    jaas = parse_jaas_config(KAFKA_EXAMPLE)
    assert jaas.login_module == PLAIN_LOGIN_MODULE
    assert jaas.control_flag == "required"
    assert dict(jaas.options) == {
        "username": "admin",
        "password": "admin-secret",
        "user_admin": "admin-secret",
        "user_alice": "alice-secret",
    }
    assert plain_users(jaas) == USERS
    assert "secret" not in repr(jaas)


def test_escapes_words_comments_and_whitespace() -> None:
    text = (
        "  com.example.Module   OPTIONAL\n"
        '  // a comment with user_x="y" in it\n'
        '  user_q="a\\"b\\\\c\\nd\\e"  /* block\n comment */ user_bare=plain_Word-1.2$\n'
        '  user_semi="x;y=z"\n'
        "  ;  "
    )
    jaas = parse_jaas_config(text)
    assert jaas == JaasConfig(
        "com.example.Module",
        "optional",
        {"user_q": 'a"b\\c\nde', "user_bare": "plain_Word-1.2$", "user_semi": "x;y=z"},
    )
    assert plain_users(jaas) == {"q": 'a"b\\c\nde', "bare": "plain_Word-1.2$", "semi": "x;y=z"}


def test_no_options_and_non_user_options() -> None:
    jaas = parse_jaas_config("M sufficient;")
    assert jaas.options == {}
    assert plain_users(parse_jaas_config('M requisite user_="x" username="u";')) == {}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   // only a comment",
        "M",
        "M required",  # no ';'
        "M always;",  # unknown flag
        '"M" required;',
        'M required user_a="x"',  # no ';'
        'M required user_a "x";',  # no '='
        "M required user_a=;",
        'M required user_a="unterminated;',
        'M required user_a="x" user_a="y";',  # twice
        'M required ="x";',
        'M required user_a="x"; N required;',  # two modules
        "M required /* unterminated comment",
    ],
)
def test_bad_jaas_names_the_key(text: str) -> None:
    with pytest.raises(SecurityConfigError) as info:
        parse_jaas_config(text, key="listener.name.sasl_plaintext.plain.sasl.jaas.config")
    assert info.value.key == "listener.name.sasl_plaintext.plain.sasl.jaas.config"
    assert str(info.value).startswith("listener.name.sasl_plaintext.plain.sasl.jaas.config: ")


def test_errors_never_quote_values() -> None:
    with pytest.raises(SecurityConfigError) as info:
        parse_jaas_config('M required user_a="hunter2" user_a="hunter3";')
    assert "hunter" not in str(info.value)
    assert parse_jaas_config("M required;").control_flag == "required"
