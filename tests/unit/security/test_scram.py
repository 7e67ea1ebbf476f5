"""SCRAM (tidelog.security.scram): the RFC 7677 and RFC 5802 vectors, Kafka's credential
string, both state machines, and every way the server refuses."""

from __future__ import annotations

import base64

import pytest

from tidelog.security.errors import AuthenticationError, SecurityConfigError
from tidelog.security.scram import (
    AUTHZID_MISMATCH_MESSAGE,
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    client_proof,
    credential_from_salted_password,
    escape_saslname,
    hi,
    invalid_credentials_message,
    make_credential,
    salted_password,
    server_key,
    server_signature,
    unescape_saslname,
)

SHA256 = ScramMechanism.SCRAM_SHA_256
SHA512 = ScramMechanism.SCRAM_SHA_512
FAILED_256 = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    "mechanism SCRAM-SHA-256"
)

# RFC 7677 section 3.
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_CNONCE = "rOprNGfwEbeRWgbNEkqO"
RFC7677_SNONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
RFC7677_NONCE = RFC7677_CNONCE + RFC7677_SNONCE

PENCIL = make_credential(SHA256, "pencil", salt=RFC7677_SALT)


def rfc_server(lookup_user: str = "user", credential: ScramCredential = PENCIL) -> ScramServer:
    return ScramServer(
        SHA256,
        lambda user: credential if user == lookup_user else None,
        server_nonce=RFC7677_SNONCE,
    )


def after_first(server: ScramServer, first: bytes = RFC7677_CLIENT_FIRST) -> ScramServer:
    server.receive(first)
    return server


def refused(server: ScramServer, message: bytes, text: str = FAILED_256) -> ScramServer:
    with pytest.raises(AuthenticationError) as info:
        server.receive(message)
    assert str(info.value) == text
    assert server.failed
    assert not server.complete
    assert server.failure_reason
    return server


# -- mechanisms and credentials -----------------------------------------------------------------


def test_mechanisms_are_kafkas() -> None:
    assert (SHA256.value, SHA256.type_id, SHA256.hash_name) == ("SCRAM-SHA-256", 1, "sha256")
    assert (SHA512.value, SHA512.type_id, SHA512.hash_name) == ("SCRAM-SHA-512", 2, "sha512")
    assert (SHA256.min_iterations, SHA256.max_iterations) == (4096, 16384)
    assert ScramMechanism.from_type(1) is SHA256
    assert ScramMechanism.from_type(2) is SHA512
    assert ScramMechanism.from_type(0) is None
    assert ScramMechanism.from_type(3) is None
    assert ScramMechanism.from_name("SCRAM-SHA-512") is SHA512
    assert ScramMechanism.from_name("PLAIN") is None


def test_rfc5802_sha1_arithmetic() -> None:
    # RFC 5802 section 5's example (SCRAM-SHA-1): the same formulas, another hash.
    salted = hi("sha1", b"pencil", base64.b64decode("QSXCR+Q6sek8bf92"), 4096)
    auth_message = (
        b"n=user,r=fyko+d2lbbFgONRv9qkxdawL,"
        b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096,"
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j"
    )
    proof = client_proof("sha1", salted, auth_message)
    assert base64.b64encode(proof) == b"v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    signature = server_signature("sha1", server_key("sha1", salted), auth_message)
    assert base64.b64encode(signature) == b"rmF9pqV8S7suAoZWja4dJRkFsKQ="


def test_credential_string_is_kafkas_and_round_trips() -> None:
    cred = ScramCredential(b"salt", b"stored", b"server", 4096)
    text = cred.format()
    assert text == "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096"
    assert ScramCredential.parse(text) == cred
    # Kafka reads the properties in any order.
    shuffled = "iterations=8192,server_key=c2VydmVy,salt=c2FsdA==,stored_key=c3RvcmVk"
    assert ScramCredential.parse(shuffled) == ScramCredential(b"salt", b"stored", b"server", 8192)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy",
        "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096,extra=1",
        "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=many",
        "salt=!!!,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096",
        "salt=c2FsdA==,salt=c2FsdA==,server_key=c2VydmVy,iterations=4096",
        "c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096",
    ],
)
def test_bad_credential_strings_name_the_key(text: str) -> None:
    with pytest.raises(SecurityConfigError) as info:
        ScramCredential.parse(text, key="SCRAM-SHA-256")
    assert info.value.key == "SCRAM-SHA-256"


def test_make_credential_matches_salted_password_form() -> None:
    salt = b"0123456789abcdef"
    salted = salted_password(SHA512, "secret", salt, 8192)
    assert make_credential(SHA512, "secret", iterations=8192, salt=salt) == (
        credential_from_salted_password(SHA512, salt, salted, 8192)
    )
    fresh = make_credential(SHA256, "secret")
    assert fresh.iterations == 4096
    assert len(fresh.salt) == 32
    assert fresh.salt != make_credential(SHA256, "secret").salt


def test_saslname_escaping() -> None:
    assert escape_saslname("a=b,c") == "a=3Db=2Cc"
    assert unescape_saslname("a=3Db=2Cc") == "a=b,c"
    assert unescape_saslname(escape_saslname("=,==,,")) == "=,==,,"


# -- the RFC 7677 exchange ------------------------------------------------------------------------


def test_server_answers_the_rfc7677_exchange() -> None:
    server = rfc_server()
    assert server.receive(RFC7677_CLIENT_FIRST) == RFC7677_SERVER_FIRST
    assert server.username == "user"
    assert (server.complete, server.failed) == (False, False)
    assert server.receive(RFC7677_CLIENT_FINAL) == RFC7677_SERVER_FINAL
    assert (server.complete, server.failed) == (True, False)
    assert server.failure_reason is None


def test_client_speaks_the_rfc7677_exchange() -> None:
    client = ScramClient(SHA256, "user", "pencil", client_nonce=RFC7677_CNONCE)
    assert client.first_message() == RFC7677_CLIENT_FIRST
    assert client.receive(RFC7677_SERVER_FIRST) == RFC7677_CLIENT_FINAL
    client.receive_final(RFC7677_SERVER_FINAL)
    assert client.complete


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
@pytest.mark.parametrize("user", ["alice", "we,ird=name", "ünïcödé"])
def test_round_trip(mechanism: ScramMechanism, user: str) -> None:
    cred = make_credential(mechanism, "s3cret", iterations=4096)
    server = ScramServer(mechanism, {user: cred}.get)
    client = ScramClient(mechanism, user, "s3cret")
    final = client.receive(server.receive(client.first_message()))
    client.receive_final(server.receive(final))
    assert server.complete
    assert client.complete
    assert server.username == user


def test_authzid_equal_to_the_user_is_accepted() -> None:
    server = rfc_server()
    first = b"n,a=user,n=user,r=" + RFC7677_CNONCE.encode()
    server_first = server.receive(first)
    assert server_first == RFC7677_SERVER_FIRST
    # c= must then echo that gs2 header; the proof covers it through the AuthMessage.
    binding = base64.b64encode(b"n,a=user,").decode()
    without_proof = f"c={binding},r={RFC7677_NONCE}"
    salted = salted_password(SHA256, "pencil", RFC7677_SALT, 4096)
    auth = f"n=user,r={RFC7677_CNONCE},{server_first.decode()},{without_proof}".encode()
    proof = base64.b64encode(client_proof("sha256", salted, auth)).decode()
    server.receive(f"{without_proof},p={proof}".encode())
    assert server.complete


def test_unknown_extensions_are_ignored() -> None:
    server = rfc_server()
    assert server.receive(RFC7677_CLIENT_FIRST + b",foo=bar") == RFC7677_SERVER_FIRST


# -- rejections -----------------------------------------------------------------------------------


def test_unknown_user() -> None:
    server = refused(rfc_server(lookup_user="someone-else"), RFC7677_CLIENT_FIRST)
    assert server.username == "user"
    assert server.failure_reason is not None
    assert "unknown user" in server.failure_reason


def test_wrong_password() -> None:
    server = after_first(rfc_server(credential=make_credential(SHA256, "other", salt=RFC7677_SALT)))
    refused(server, RFC7677_CLIENT_FINAL)
    assert server.failure_reason is not None
    assert "proof" in server.failure_reason


def test_authzid_of_another_user() -> None:
    first = b"n,a=admin,n=user,r=" + RFC7677_CNONCE.encode()
    refused(rfc_server(), first, AUTHZID_MISMATCH_MESSAGE)


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"garbage",
        b"y,,n=user,r=abc",  # channel binding flags other than n
        b"p=tls-unique,,n=user,r=abc",
        b"n,x=user,n=user,r=abc",  # not an authzid
        b"n,,m=ext,n=user,r=abc",  # reserved mandatory extension
        b"n,,r=abc,n=user",  # wrong order
        b"n,,n=user",  # no nonce
        b"n,,n=user,r=",  # empty nonce
        b"n,,n=user,r=a b",  # not printable
        b"n,,n=,r=abc",  # empty name
        b"n,,n=us=er,r=abc",  # bad escape
        b"n,,n=user,r=abc,tokenauth=true",  # delegation tokens
        b"n,,n=\xff,r=abc",  # not UTF-8
        b"n,,n=us\x00er,r=abc",
    ],
)
def test_malformed_client_first(first: bytes) -> None:
    refused(rfc_server(), first)


def client_final(nonce: str = RFC7677_NONCE, binding: str = "biws", proof: str = "") -> bytes:
    if not proof:
        salted = salted_password(SHA256, "pencil", RFC7677_SALT, 4096)
        auth = (
            f"n=user,r={RFC7677_CNONCE},{RFC7677_SERVER_FIRST.decode()},c={binding},r={nonce}"
        ).encode()
        proof = base64.b64encode(client_proof("sha256", salted, auth)).decode()
    return f"c={binding},r={nonce},p={proof}".encode()


def test_client_final_helper_builds_a_good_message() -> None:
    assert client_final() == RFC7677_CLIENT_FINAL


@pytest.mark.parametrize(
    "final",
    [
        client_final(nonce=RFC7677_CNONCE),  # without the server's part
        client_final(nonce=RFC7677_NONCE + "x"),
        client_final(nonce="other" + RFC7677_SNONCE),
        client_final(binding=base64.b64encode(b"y,,").decode()),  # does not echo n,,
        client_final(proof="AAAA"),  # wrong length
        client_final(proof="!!!!"),  # not base64
        b"c=biws,r=" + RFC7677_NONCE.encode(),  # no proof
        b"r=" + RFC7677_NONCE.encode() + b",c=biws,p=AAAA",
        b"",
    ],
)
def test_bad_client_final(final: bytes) -> None:
    refused(after_first(rfc_server()), final)


def test_the_doubled_client_nonce_of_old_librdkafka_is_accepted() -> None:
    # librdkafka < 2.6.1 (Debian's kcat) sends r=<client nonce><client nonce><server nonce>
    # (confluentinc/librdkafka#4895); the proof is over that message as sent.
    server = after_first(rfc_server())
    assert server.receive(client_final(nonce=RFC7677_CNONCE + RFC7677_NONCE))
    assert (server.complete, server.failed) == (True, False)


def test_only_that_one_extra_form_is_accepted() -> None:
    refused(after_first(rfc_server()), client_final(nonce="x" + RFC7677_NONCE))
    refused(after_first(rfc_server()), client_final(nonce=RFC7677_NONCE + RFC7677_CNONCE))


def test_stored_credential_outside_the_iteration_range() -> None:
    weak = make_credential(SHA256, "pencil", iterations=1024, salt=RFC7677_SALT)
    refused(rfc_server(credential=weak), RFC7677_CLIENT_FIRST)


def test_messages_after_the_end_are_refused() -> None:
    server = rfc_server()
    server.receive(RFC7677_CLIENT_FIRST)
    server.receive(RFC7677_CLIENT_FINAL)
    refused(server, RFC7677_CLIENT_FINAL)
    failed = refused(rfc_server(lookup_user="nobody"), RFC7677_CLIENT_FIRST)
    refused(failed, RFC7677_CLIENT_FIRST)


def test_sha512_message_names_its_mechanism() -> None:
    server = ScramServer(SHA512, lambda _user: None)
    with pytest.raises(AuthenticationError) as info:
        server.receive(b"n,,n=alice,r=abc")
    assert str(info.value) == invalid_credentials_message(SHA512)
    assert str(info.value).endswith("SCRAM-SHA-512")


# -- the client's checks --------------------------------------------------------------------------


def rfc_client() -> ScramClient:
    client = ScramClient(SHA256, "user", "pencil", client_nonce=RFC7677_CNONCE)
    client.first_message()
    return client


@pytest.mark.parametrize(
    ("server_first", "message"),
    [
        (b"r=otherNonce,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "Invalid server nonce"),
        (b"r=" + RFC7677_CNONCE.encode() + b",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
        (b"r=" + RFC7677_NONCE.encode() + b",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1000", "minimum 4096"),
        (b"r=" + RFC7677_NONCE.encode() + b",i=4096", "server first message"),
        (b"m=x,r=" + RFC7677_NONCE.encode() + b",s=AA==,i=4096", "server first message"),
    ],
)
def test_client_refuses_bad_server_first(server_first: bytes, message: str) -> None:
    with pytest.raises(AuthenticationError, match=message):
        rfc_client().receive(server_first)


@pytest.mark.parametrize(
    ("server_final", "message"),
    [
        (b"v=AAAA", "Sasl server signature verification failed"),
        (b"v=!!", "Sasl server signature verification failed"),
        (b"x=1", "Sasl server signature verification failed"),
        (b"e=other-error", "failed with error: other-error"),
        (b"", "server final message"),
    ],
)
def test_client_refuses_bad_server_final(server_final: bytes, message: str) -> None:
    client = rfc_client()
    client.receive(RFC7677_SERVER_FIRST)
    with pytest.raises(AuthenticationError, match=message):
        client.receive_final(server_final)
    assert not client.complete


def test_client_refuses_out_of_order_calls() -> None:
    client = ScramClient(SHA256, "user", "pencil")
    with pytest.raises(AuthenticationError):
        client.receive(RFC7677_SERVER_FIRST)
    client.first_message()
    with pytest.raises(AuthenticationError):
        client.first_message()
    with pytest.raises(AuthenticationError):
        client.receive_final(RFC7677_SERVER_FINAL)
