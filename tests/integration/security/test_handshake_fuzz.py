"""Hostile bytes against SASL_SSL and SASL_PLAINTEXT listeners before (and during) login
(issue 20): garbage, truncated and corrupted TLS records, huge size prefixes, SASL requests
out of order or malformed, oversized tokens, a Produce before authentication, hundreds of
half-open connections, and a seeded random mix. Each case checks what the peer gets (an
error code, or the connection closed) and, where the broker has something to say, its log
line; after each, the broker still answers ApiVersions and a good client still produces.

Everything is bounded: fixed seeds, small counts, short timeouts (the module runs in about
15 s with its two one-broker clusters).
"""

from __future__ import annotations

import contextlib
import random
import socket
import ssl
import time
from collections.abc import Iterator

import pytest

from tests.integration.security.conftest import RawConn, Secured, size_prefix, unique
from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey

pytestmark = pytest.mark.integration

#: One broker each: the fuzz aims at one listener.
MODES = ["sasl_ssl/1", "sasl_plaintext"]
MAX_RECEIVE_SIZE = 524288  # sasl.server.max.receive.size's default
HUGE = 2**31 - 1
SASL_APIS = {int(ApiKey.API_VERSIONS), int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE)}


@pytest.fixture
def healthy_after(secured: Secured) -> Iterator[str]:
    """A topic; after the test the broker answers ApiVersions and a good client (the
    admin, with librdkafka) produces to it, and the records are there."""
    topic = secured.create_topic(unique("after-fuzz"))
    yield topic
    assert secured.broker_alive()
    assert secured.answers_api_versions()
    before = sum(secured.end_offsets(topic))
    secured.produce_as_admin(topic, [b"still-serving-1", b"still-serving-2"])
    assert sum(secured.end_offsets(topic)) == before + 2


def conn(secured: Secured, *, timeout: float = 5.0) -> RawConn:
    """A bare connection to broker 1 (TLS done on SASL_SSL)."""
    return RawConn(secured.port(), secured.tls_context(), timeout=timeout)


def local_port(c: RawConn) -> int:
    return int(c.sock.getsockname()[1])


def handshake(c: RawConn, mechanism: str = "SCRAM-SHA-256", version: int = 1) -> ErrorCode:
    body = c.call(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})
    return ErrorCode(body.error_code)


def authenticate(c: RawConn, token: bytes, version: int = 2) -> tuple[ErrorCode, str | None]:
    body = c.call(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token})
    return ErrorCode(body.error_code), body.error_message


class BioTls:
    """A TLS client over ``ssl.MemoryBIO``: every ciphertext byte is ours to send, cut or
    corrupt."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing, server_hostname="127.0.0.1")

    def close(self) -> None:
        self.sock.close()

    def client_hello(self) -> bytes:
        with contextlib.suppress(ssl.SSLWantReadError):
            self.tls.do_handshake()
        return self.outgoing.read()

    def complete_handshake(self) -> None:
        while True:
            try:
                self.tls.do_handshake()
            except ssl.SSLWantReadError:
                self.sock.sendall(self.outgoing.read())
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("closed during the handshake") from None
                self.incoming.write(data)
                continue
            self.sock.sendall(self.outgoing.read())
            return

    def encrypt(self, plaintext: bytes) -> bytes:
        self.tls.write(plaintext)
        return self.outgoing.read()

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(65536):
                pass
        except TimeoutError:
            return False
        except OSError:
            return True
        return True


def api_versions_frame() -> bytes:
    client_id = b"fuzz"
    body = (
        int(ApiKey.API_VERSIONS).to_bytes(2, "big")
        + (0).to_bytes(2, "big")
        + (1).to_bytes(4, "big")
        + len(client_id).to_bytes(2, "big")
        + client_id
    )
    return size_prefix(len(body)) + body


# --- garbage and broken framing ---------------------------------------------------------------


@pytest.mark.parametrize("secured", MODES, indirect=True)
def test_random_frames_before_login_close_only_their_connection(
    secured: Secured, healthy_after: str
) -> None:
    rng = random.Random(20)
    mark = secured.log_mark()
    ports = []
    for _ in range(40):
        api_key = rng.choice([k for k in range(70) if k not in SASL_APIS])
        payload = api_key.to_bytes(2, "big") + rng.randbytes(rng.randrange(0, 300))
        with conn(secured) as c:
            ports.append(local_port(c))
            c.send_bytes(size_prefix(len(payload)) + payload)
            assert c.closed_by_peer(), f"api key {api_key}: the connection stayed open"
    # One line per connection, naming it.
    logged = mark.wait_for(r"closing connection from 127\.0\.0\.1:", count=len(ports))
    for port in ports:
        assert any(f"127.0.0.1:{port}:" in line for line in logged), port


@pytest.mark.parametrize("secured", ["sasl_ssl/1"], indirect=True)
def test_garbage_instead_of_tls(secured: Secured, healthy_after: str) -> None:
    rng = random.Random(21)
    mark = secured.log_mark()
    for _ in range(20):
        # Not a TLS handshake record (content type 22) nor an SSLv2 hello (high bit set):
        # OpenSSL must refuse it from the record header alone.
        garbage = bytes([rng.choice([b for b in range(128) if b != 22])]) + rng.randbytes(
            rng.randrange(5, 200)
        )
        with socket.create_connection(("127.0.0.1", secured.port()), timeout=5) as sock:
            sock.sendall(garbage)
            sock.settimeout(5)
            with contextlib.suppress(ConnectionResetError):
                while sock.recv(4096):
                    pass
    mark.wait_for(r"on listener SASL_SSL: TLS handshake failed: ", count=20)


@pytest.mark.parametrize("secured", ["sasl_ssl/1"], indirect=True)
def test_truncated_and_corrupted_tls_records(secured: Secured, healthy_after: str) -> None:
    context = secured.tls_context()
    assert context is not None
    mark = secured.log_mark()

    # A ClientHello cut short, then EOF: the broker closes.
    for cut in (1, 5, 40):
        tls = BioTls(secured.port(), context)
        try:
            hello = tls.client_hello()
            assert len(hello) > cut
            tls.sock.sendall(hello[:cut])
            tls.sock.shutdown(socket.SHUT_WR)
            assert tls.closed_by_peer()
        finally:
            tls.close()

    # After the handshake: an ApiVersions request's record cut short, then EOF.
    tls = BioTls(secured.port(), context)
    try:
        tls.complete_handshake()
        record = tls.encrypt(api_versions_frame())
        tls.sock.sendall(record[: len(record) // 2])
        tls.sock.shutdown(socket.SHUT_WR)
        assert tls.closed_by_peer()
    finally:
        tls.close()

    # After the handshake: a record with a flipped bit fails its MAC.
    tls = BioTls(secured.port(), context)
    try:
        tls.complete_handshake()
        record = bytearray(tls.encrypt(api_versions_frame()))
        record[-3] ^= 0x40
        tls.sock.sendall(bytes(record))
        assert tls.closed_by_peer()
    finally:
        tls.close()
    mark.wait_for(r"on listener SASL_SSL: TLS error: ")


@pytest.mark.parametrize("secured", MODES, indirect=True)
def test_huge_size_prefix_before_and_inside_the_sasl_exchange(
    secured: Secured, healthy_after: str
) -> None:
    mark = secured.log_mark()
    ports = []
    for stage in ("first", "after-api-versions", "after-handshake-v1", "after-handshake-v0"):
        with conn(secured) as c:
            ports.append(local_port(c))
            if stage == "after-api-versions":
                assert c.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0
            elif stage == "after-handshake-v1":
                assert handshake(c) == ErrorCode.NONE
            elif stage == "after-handshake-v0":
                assert handshake(c, version=0) == ErrorCode.NONE
            c.send_bytes(size_prefix(HUGE) + b"\x00" * 16)
            assert c.closed_by_peer(), stage
    for port in ports:
        mark.wait_for(rf"closing connection from 127\.0\.0\.1:{port}\b.*: frame size {HUGE}\b")


@pytest.mark.parametrize("secured", MODES, indirect=True)
def test_frame_above_max_receive_size_before_login_is_refused_at_once(
    secured: Secured, healthy_after: str
) -> None:
    """Kafka reads every frame before and during a SASL login with
    sasl.server.max.receive.size as its limit: an unauthenticated client cannot make the
    broker buffer socket.request.max.bytes (100 MiB). The size prefix alone is refused."""
    mark = secured.log_mark()
    with conn(secured) as c:
        port = local_port(c)
        c.send_bytes(size_prefix(MAX_RECEIVE_SIZE + 1) + b"\x00\x11")
        assert c.closed_by_peer(timeout=3.0)
    mark.wait_for(
        rf"closing connection from 127\.0\.0\.1:{port} on listener {secured.protocol}: "
        rf"frame size {MAX_RECEIVE_SIZE + 1} before SASL authentication exceeds "
        rf"sasl.server.max.receive.size={MAX_RECEIVE_SIZE}"
    )


@pytest.mark.parametrize("secured", ["sasl_plaintext"], indirect=True)
def test_unsupported_mechanism_closes_the_connection(secured: Secured) -> None:
    with conn(secured) as c:
        assert handshake(c, "GSSAPI") == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert c.closed_by_peer(timeout=2.0)


# --- the SASL exchange out of order or malformed ----------------------------------------------


@pytest.mark.parametrize("secured", MODES, indirect=True)
def test_sasl_requests_out_of_order_or_malformed(secured: Secured, healthy_after: str) -> None:
    listener = secured.protocol
    mark = secured.log_mark()

    # A mechanism the listener does not offer: the enabled ones in the answer, then closed.
    with conn(secured) as c:
        body = c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert body.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert sorted(body.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        # (It should also close: test_unsupported_mechanism_closes_the_connection.)
    mark.wait_for(rf"listener {listener}: .*'GSSAPI' is not enabled")

    # SaslAuthenticate before any SaslHandshake.
    with conn(secured) as c:
        code, message = authenticate(c, b"n,,n=admin,r=abc")
        assert code == ErrorCode.ILLEGAL_SASL_STATE
        assert message is not None
        assert "SASL_AUTHENTICATE" in message
        assert c.closed_by_peer()
    mark.wait_for(rf"listener {listener}: .*SaslAuthenticate before a SaslHandshake v1\+")

    # SCRAM client-first messages with attributes missing or wrong.
    for token in (
        b"n,,n=admin",  # no nonce
        b"n,,r=abcdef",  # no user
        b"n,,n=admin,r=",  # empty nonce
        b"n,n=admin,r=abc",  # no gs2 header
        b"y,,n=admin,r=abc",  # channel binding flag
        b"",
    ):
        with conn(secured) as c:
            assert handshake(c) == ErrorCode.NONE
            code, message = authenticate(c, token)
            assert code == ErrorCode.SASL_AUTHENTICATION_FAILED, token
            assert message is not None
            assert "SCRAM-SHA-256" in message
            assert c.closed_by_peer(), token
    mark.wait_for(rf"listener {listener}: mechanism SCRAM-SHA-256, .*malformed", count=6)

    # A raw (SaslHandshake v0) token of random bytes: Kafka just closes.
    rng = random.Random(22)
    for _ in range(5):
        with conn(secured) as c:
            assert handshake(c, "SCRAM-SHA-512", version=0) == ErrorCode.NONE
            token = rng.randbytes(rng.randrange(1, 400))
            c.send_bytes(size_prefix(len(token)) + token)
            assert c.closed_by_peer()
    mark.wait_for(rf"listener {listener}: mechanism SCRAM-SHA-512, user \(unknown\)", count=5)

    # A token larger than sasl.server.max.receive.size, in SaslAuthenticate and raw: its
    # frame is over the limit, so the connection closes without an answer (as Kafka's).
    big = b"n,,n=admin,r=" + b"x" * (MAX_RECEIVE_SIZE + 100)
    for version in (1, 0):
        with conn(secured, timeout=10) as c:
            assert handshake(c, "SCRAM-SHA-256", version=version) == ErrorCode.NONE
            if version == 1:
                _, frame = c.frame(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": big})
            else:
                frame = size_prefix(len(big)) + big
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                c.send_bytes(frame)
            assert c.closed_by_peer()
    mark.wait_for(
        rf"on listener {listener}: frame size \d+ before SASL authentication exceeds "
        rf"sasl.server.max.receive.size={MAX_RECEIVE_SIZE}",
        count=2,
    )


@pytest.mark.parametrize("secured", MODES, indirect=True)
def test_produce_before_authentication_writes_nothing(secured: Secured, healthy_after: str) -> None:
    from tidelog.client import Record, build_batch

    records = build_batch([Record(value=b"sneaked-in")])
    before = secured.end_offsets(healthy_after)
    mark = secured.log_mark()
    for steps in ((), ("api_versions",), ("api_versions", "handshake")):
        with conn(secured) as c:
            if "api_versions" in steps:
                assert c.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0
            if "handshake" in steps:
                assert handshake(c) == ErrorCode.NONE
            _, frame = c.frame(
                ApiKey.PRODUCE,
                9,
                {
                    "transactional_id": None,
                    "acks": -1,
                    "timeout": 5000,
                    "topic_data": [
                        {
                            "name": healthy_after,
                            "partition_data": [{"index": 0, "records": records}],
                        }
                    ],
                },
            )
            c.send_bytes(frame)
            assert c.closed_by_peer(), steps
    mark.wait_for(
        rf"(?i)produce request before SASL authentication on listener {secured.protocol}",
        count=3,
    )
    assert secured.end_offsets(healthy_after) == before


# --- many connections, and a random mix -------------------------------------------------------


@pytest.mark.parametrize("secured", MODES, indirect=True)
def test_hundreds_of_half_open_connections(secured: Secured, healthy_after: str) -> None:
    """300 connections that started and stopped half-way (a cut ClientHello on TLS, a
    frame's first bytes otherwise) while a good client works."""
    context = secured.tls_context()
    partial = api_versions_frame()[:3]
    if context is not None:
        hello = BioTls(secured.port(), context)
        partial = hello.client_hello()[:20]
        hello.close()
    sockets: list[socket.socket] = []
    try:
        for _ in range(300):
            sock = socket.create_connection(("127.0.0.1", secured.port()), timeout=5)
            sockets.append(sock)
            sock.sendall(partial)
        started = time.monotonic()
        assert secured.answers_api_versions()
        secured.produce_as_admin(healthy_after, [b"among-the-half-open"])
        assert time.monotonic() - started < 8
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.parametrize("secured", MODES, indirect=True)
def test_seeded_random_sasl_sequences(secured: Secured, healthy_after: str) -> None:
    """Random sequences of SaslHandshake/SaslAuthenticate/ApiVersions/other requests with
    random mechanisms and tokens: every answer decodes, nobody gets in, nothing breaks."""
    rng = random.Random(23)
    mark = secured.log_mark()
    mechanisms = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "", "x" * 300]
    for _ in range(25):
        with conn(secured) as c:
            for _ in range(rng.randrange(1, 6)):
                step = rng.choice(["handshake", "authenticate", "api_versions", "other", "raw"])
                try:
                    if step == "handshake":
                        version = rng.choice([0, 1])
                        body = c.call(
                            ApiKey.SASL_HANDSHAKE, version, {"mechanism": rng.choice(mechanisms)}
                        )
                        assert body.error_code in (
                            ErrorCode.NONE,
                            ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                            ErrorCode.ILLEGAL_SASL_STATE,
                        )
                    elif step == "authenticate":
                        token = rng.choice(
                            [
                                rng.randbytes(rng.randrange(0, 64)),
                                b"\x00admin\x00" + rng.randbytes(8),
                                b"n,,n=admin,r=" + rng.randbytes(8).hex().encode(),
                            ]
                        )
                        code, _ = authenticate(c, token, rng.choice([0, 1, 2]))
                        # Random bytes never log anyone in.
                        assert code != ErrorCode.NONE or token.startswith(b"n,,n=admin,r=")
                    elif step == "api_versions":
                        assert c.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0
                    elif step == "other":
                        _, frame = c.frame(ApiKey.METADATA, 1, {"topics": None})
                        c.send_bytes(frame)
                        assert c.recv_frame(timeout=5) is None, "Metadata answered before login"
                        break
                    else:
                        junk = rng.randbytes(rng.randrange(0, 100))
                        c.send_bytes(size_prefix(len(junk)) + junk)
                        answer = c.recv_frame(timeout=5)
                        if answer is None:
                            break
                except (ConnectionError, ssl.SSLError):
                    break  # an earlier step failed the exchange: closed, as it should
                except AssertionError as exc:
                    if "closed the connection" in str(exc):
                        break
                    raise
    # Whatever happened, no connection was ever authenticated.
    assert not mark.matching("authenticated as")
