"""What a secured cluster refuses (issue 20), with real clients against real processes.

Each refusal is checked three ways: what the user sees (the client's error), what the broker
logs (the line that tells an operator why), and that nothing was written (the admin reads
the topic's end offsets before and after). Logins: a wrong password, an unknown user, a
client certificate from a foreign CA or an expired one, a client that does not trust the
broker, a plaintext client on a TLS port. Authorization: a user without ACLs (produce,
consume, Metadata, CreateTopics, DeleteTopics), deny beating allow, prefixed ACLs, and
``tidelog acls remove`` reaching every broker. ZooKeeper: an unauthenticated client can
read but not rewrite the cluster's state, nor read the SCRAM credentials.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from tests.harness import wait_until
from tests.integration.security.conftest import Secured, librdkafka_errors, unique
from tidelog.client import BlockingClient, Record, build_batch
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.security.client_config import ClientSecurity

pytestmark = pytest.mark.integration

SCRAM_REFUSED = (
    "Authentication failed during authentication due to invalid credentials with SASL "
    "mechanism SCRAM-SHA-256"
)


@dataclass
class Guarded:
    """A topic holding records the admin wrote, and its end offsets as the admin reads
    them: after the test they must be the same (nothing refused was written)."""

    secured: Secured
    name: str
    ends: list[int]

    def accept_written(self) -> list[int]:
        """The test wrote on purpose (a control): take the new end offsets."""
        self.ends = self.secured.end_offsets(self.name)
        return self.ends


@pytest.fixture
def guarded(secured: Secured) -> Iterator[Guarded]:
    name = secured.create_topic(unique("guarded"), partitions=len(secured.broker_ids))
    secured.produce_as_admin(name, [b"before-%d" % i for i in range(6)])
    topic = Guarded(secured, name, secured.end_offsets(name))
    assert sum(topic.ends) == 6
    yield topic
    assert secured.end_offsets(name) == topic.ends, "a refused client wrote records"


def texts(*errors: list[object]) -> list[str]:
    return [str(e) for group in errors for e in group if e is not None]


def user_security(secured: Secured, user: str, password: str) -> ClientSecurity:
    return ClientSecurity(secured.protocol, secured.tls_context(), "SCRAM-SHA-256", user, password)


def batch(*values: bytes) -> bytes:
    return build_batch([Record(value=v) for v in values])


# --- logins -----------------------------------------------------------------------------------


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_wrong_password_is_refused_and_logged_without_the_password(
    secured: Secured, guarded: Guarded, caplog: pytest.LogCaptureFixture
) -> None:
    name = guarded.name
    user = unique("alice")
    secured.add_user(user, "the-right-password")
    secured.acls("add", "--allow-principal", f"User:{user}", "--producer", "--topic", name)
    wrong = "w0rng-pa55word-xyz"
    mark = secured.log_mark()

    client_errors, _ = librdkafka_errors(
        secured.sasl_conf(user, wrong), name, want="Authentication failed"
    )
    assert any(SCRAM_REFUSED in t for t in texts(client_errors)), texts(client_errors)
    assert {e.code() for e in client_errors} & {KafkaError._AUTHENTICATION}

    # aiokafka says the same, naming Kafka's error 58.
    import aiokafka
    from aiokafka.errors import KafkaConnectionError

    async def aiokafka_login() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=secured.bootstrap,
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username=user,
            sasl_plain_password=wrong,
            ssl_context=secured.tls_context(),
        )
        try:
            await producer.start()
        finally:
            await producer.stop()

    with caplog.at_level(logging.ERROR, logger="aiokafka"), pytest.raises(KafkaConnectionError):
        asyncio.run(aiokafka_login())
    assert "SaslAuthenticationFailed" in caplog.text
    assert SCRAM_REFUSED in caplog.text

    lines = mark.wait_for(
        rf"SASL authentication failed on listener SASL_SSL: mechanism SCRAM-SHA-256, "
        rf"user '{user}': invalid client proof \(wrong password\)",
        count=2,
    )
    assert all(" INFO " in line for line in lines)
    assert not [line for line in mark.lines() if wrong in line], "the password was logged"

    # The user itself is fine: the right password produces.
    _, delivery = librdkafka_errors(
        secured.sasl_conf(user, "the-right-password"), name, expect_delivery=True
    )
    assert delivery == [None]
    assert sum(guarded.accept_written()) == 7


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_unknown_user_is_refused_like_a_wrong_password(secured: Secured, guarded: Guarded) -> None:
    name = guarded.name
    ghost = unique("ghost")
    mark = secured.log_mark()
    client_errors, _ = librdkafka_errors(
        secured.sasl_conf(ghost, "whatever"), name, want="Authentication failed"
    )
    # The same words as for a wrong password: the client learns nothing about who exists.
    assert any(SCRAM_REFUSED in t for t in texts(client_errors)), texts(client_errors)
    mark.wait_for(
        rf"SASL authentication failed on listener SASL_SSL: mechanism SCRAM-SHA-256, "
        rf"user '{ghost}': unknown user"
    )


@pytest.mark.parametrize("secured", ["ssl"], indirect=True)
def test_client_certificate_from_a_foreign_ca_is_refused(
    secured: Secured, guarded: Guarded
) -> None:
    name = guarded.name
    cn = unique("mallory")
    # The principal is allowed: only the certificate's issuer is wrong.
    secured.acls("add", "--allow-principal", f"User:{cn}", "--producer", "--topic", name)
    forged = secured.issue_client_cert(cn, foreign_ca=True)
    mark = secured.log_mark()
    client_errors, _ = librdkafka_errors(secured.cert_conf(forged), name, want="unknown ca")
    assert any("alert unknown ca" in t for t in texts(client_errors)), texts(client_errors)
    mark.wait_for(
        r"closing connection from 127\.0\.0\.1:\d+ on listener SSL: TLS handshake "
        r"failed: unable to get local issuer certificate"
    )
    # The same name with a certificate from the cluster's CA is served (so the refusal was
    # the certificate's).
    _, delivery = librdkafka_errors(
        secured.cert_conf(secured.issue_client_cert(cn)), name, expect_delivery=True
    )
    assert delivery == [None]
    assert sum(guarded.accept_written()) == 7


def expired_window() -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.UTC)
    return now - datetime.timedelta(days=30), now - datetime.timedelta(days=1)


@pytest.mark.parametrize("secured", ["ssl"], indirect=True)
def test_expired_client_certificate_is_refused(secured: Secured, guarded: Guarded) -> None:
    name = guarded.name
    cn = unique("late")
    secured.acls("add", "--allow-principal", f"User:{cn}", "--producer", "--topic", name)
    not_before, not_after = expired_window()
    expired = secured.issue_client_cert(cn, not_before=not_before, not_after=not_after)
    mark = secured.log_mark()
    client_errors, _ = librdkafka_errors(
        secured.cert_conf(expired), name, want="certificate expired"
    )
    assert any("alert certificate expired" in t for t in texts(client_errors))
    mark.wait_for(r"on listener SSL: TLS handshake failed: certificate has expired")


@pytest.mark.parametrize("secured", ["ssl"], indirect=True)
def test_refused_certificate_log_names_the_reason(secured: Secured) -> None:
    not_before, not_after = expired_window()
    expired = secured.issue_client_cert("old", not_before=not_before, not_after=not_after)
    mark = secured.log_mark()
    context = secured.tls_context(cert=expired)
    assert context is not None
    raw = socket.create_connection(("127.0.0.1", secured.port()), timeout=10)
    with (
        pytest.raises(ssl.SSLError, match="certificate expired"),
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.recv(1)  # TLS 1.3: the server's verdict comes after the client's handshake
    line = mark.wait_for("TLS handshake failed")[0]
    assert "expired" in line, line


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_client_that_does_not_trust_the_broker_stops(secured: Secured, guarded: Guarded) -> None:
    name = guarded.name
    mark = secured.log_mark()
    conf = secured.admin_conf()
    del conf["ssl.ca.location"]  # no CA: the system's store, which does not hold ours
    client_errors, _ = librdkafka_errors(conf, name, want="certificate verify failed")
    # librdkafka words it "SSL handshake failed: ... certificate verify failed" or
    # "error:0A000086:SSL routines::certificate verify failed (... in state SSL_HANDSHAKE)".
    assert any("certificate verify failed" in t for t in texts(client_errors)), texts(client_errors)
    mark.wait_for(r"on listener SASL_SSL: TLS handshake failed: TLSV1_ALERT_UNKNOWN_CA")
    # No SASL exchange began: the admin's password never left the client.
    assert not mark.matching("SASL authentication")


@pytest.mark.parametrize("secured", ["ssl"], indirect=True)
def test_plaintext_client_on_a_tls_port(secured: Secured) -> None:
    mark = secured.log_mark()
    client_id = b"plaintext-client"
    request = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    with socket.create_connection(("127.0.0.1", secured.port()), timeout=10) as sock:
        local_port = sock.getsockname()[1]
        sock.sendall(struct.pack(">i", len(request)) + request)
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
    # The user gets no Kafka answer: at most a TLS alert record (content type 21), then EOF.
    assert not received or received[0] == 21, received[:20]
    line = mark.wait_for(rf"closing connection from 127\.0\.0\.1:{local_port} ")[0]
    assert "on listener SSL: TLS handshake failed: WRONG_VERSION_NUMBER" in line
    time.sleep(0.3)
    assert len(mark.matching(rf"127\.0\.0\.1:{local_port}\b")) == 1, mark.lines()
    assert secured.broker_alive()
    assert secured.answers_api_versions()


# --- authorization ----------------------------------------------------------------------------


def consumer_error(conf: dict[str, str], topic: str, group: str) -> KafkaError:
    """Subscribe in ``group`` and return the first error the consumer reports."""
    consumer = Consumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": "false"}
    )
    found: list[KafkaError] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 20
        while not found and time.monotonic() < deadline:
            try:
                message = consumer.poll(0.5)
            except KafkaException as exc:
                found.append(exc.args[0])
                break
            if message is not None:
                assert message.error() is not None, f"read {message.value()!r}"
                found.append(message.error())
    finally:
        consumer.close()
    assert found, "the consumer reported no error"
    return found[0]


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_user_without_acls_is_refused_everything(secured: Secured, guarded: Guarded) -> None:
    name = guarded.name
    user, password = unique("nobody"), "nobody-password"
    secured.add_user(user, password)
    conf = secured.sasl_conf(user, password)
    principal = rf"Principal = User:{user} is Denied Operation"
    mark = secured.log_mark()

    # Produce.
    _, delivery = librdkafka_errors(conf, name, want="authorization failed")
    assert [e.code() for e in delivery if e is not None] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    mark.wait_for(rf"{principal} = \w+ from host = 127\.0\.0\.1 on resource = Topic:LITERAL:{name}")

    # Consume: no READ on the group first, then no READ on the topic.
    group = unique("nogroup")
    assert consumer_error(conf, name, group).code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    mark.wait_for(
        rf"{principal} = Describe .* on resource = Group:LITERAL:{group} for request = "
        "FindCoordinator"
    )
    readable_group = unique("okgroup")
    secured.acls(
        "add", "--allow-principal", f"User:{user}", "--operation", "Read", "--group", readable_group
    )
    assert (
        consumer_error(conf, name, readable_group).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    )

    # Metadata for all topics lists only what it may describe: nothing, then one topic.
    admin = AdminClient(conf)
    assert name in secured.topic_names()
    assert set(admin.list_topics(timeout=10).topics) == set()
    visible = secured.create_topic(unique("visible"))
    secured.acls(
        "add", "--allow-principal", f"User:{user}", "--operation", "Describe", "--topic", visible
    )
    wait_until(
        lambda: set(admin.list_topics(timeout=10).topics) == {visible},
        10,
        "Metadata to list the one describable topic",
    )

    # CreateTopics and DeleteTopics.
    wanted = unique("wanted")
    with pytest.raises(KafkaException) as created:
        admin.create_topics([NewTopic(wanted, 1, 1)])[wanted].result(timeout=20)
    assert created.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as deleted:
        admin.delete_topics([name])[name].result(timeout=20)
    assert deleted.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    mark.wait_for(rf"{principal} = Delete .* on resource = Topic:LITERAL:{name}")
    topics = secured.topic_names()
    assert name in topics
    assert wanted not in topics


# Seen once on a loaded machine (a CI rehearsal beside three test-running helpers): an
# asyncio socket transport of this test process was collected unclosed during it (whose was
# not found; kafka-python 3.0's network layer runs on asyncio). The refusal checked is the
# broker's, in another process; a client's leaked socket is not what this test is about.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_deny_beats_allow(secured: Secured, guarded: Guarded) -> None:
    name, ends = guarded.name, guarded.ends
    user, password = unique("torn"), "torn-password"
    secured.add_user(user, password)
    principal = f"User:{user}"
    secured.acls("add", "--allow-principal", principal, "--operation", "All", "--topic", name)
    secured.acls(
        "add",
        "--deny-principal",
        principal,
        "--operation",
        "Write",
        "--topic",
        name[:4],
        "--resource-pattern-type",
        "prefixed",
    )
    mark = secured.log_mark()
    _, delivery = librdkafka_errors(secured.sasl_conf(user, password), name, want="authoriz")
    assert [e.code() for e in delivery if e is not None] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    mark.wait_for(rf"Principal = {principal} is Denied Operation = Write .*Topic:LITERAL:{name}")
    # The allow still holds for everything the deny does not name: it reads (kafka-python
    # without a group: the user has no ACL on any group).
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=secured.bootstrap,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username=user,
        sasl_plain_password=password,
        ssl_cafile=str(secured.ca),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    got: list[bytes] = []
    try:
        consumer.assign([KTopicPartition(name, p) for p in range(len(ends))])
        deadline = time.monotonic() + 20
        while len(got) < sum(ends) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in records]
    finally:
        consumer.close()
    assert sorted(got) == sorted(b"before-%d" % i for i in range(6))


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_prefixed_acls(secured: Secured) -> None:
    prefix = unique("pfx") + "-"
    inside = secured.create_topic(prefix + "orders")
    short = secured.create_topic(prefix[:-1])  # the prefix without its last character
    elsewhere = secured.create_topic("x" + prefix + "orders")
    user, password = unique("pre"), "pre-password"
    secured.add_user(user, password)
    secured.acls(
        "add",
        "--allow-principal",
        f"User:{user}",
        "--operation",
        "Write",
        "--operation",
        "Describe",
        "--topic",
        prefix,
        "--resource-pattern-type",
        "prefixed",
    )
    conf = secured.sasl_conf(user, password)
    _, delivery = librdkafka_errors(conf, inside, expect_delivery=True)
    assert delivery == [None]
    for refused in (short, elsewhere):
        _, delivery = librdkafka_errors(conf, refused, want="authoriz")
        assert [e.code() for e in delivery if e is not None] == [
            KafkaError.TOPIC_AUTHORIZATION_FAILED
        ], refused
    assert secured.end_offsets(inside) == [1]
    assert secured.end_offsets(short) == [0]
    assert secured.end_offsets(elsewhere) == [0]


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_acls_remove_takes_effect_on_every_broker(secured: Secured, guarded: Guarded) -> None:
    name, ends = guarded.name, guarded.ends
    user, password = unique("fleeting"), "fleeting-password"
    secured.add_user(user, password)
    principal = f"User:{user}"
    secured.acls("add", "--allow-principal", principal, "--producer", "--topic", name)
    admin = AdminClient(secured.admin_conf())
    leaders = {
        p: m.leader for p, m in admin.list_topics(name, timeout=10).topics[name].partitions.items()
    }
    assert set(leaders.values()) == set(secured.broker_ids), leaders  # one per broker

    with BlockingClient(
        secured.bootstrap, security=user_security(secured, user, password)
    ) as client:

        def produce_everywhere() -> dict[int, ErrorCode]:
            """Each broker's answer to a Produce for the partition it leads."""
            answers = {}
            for partition, leader in leaders.items():
                result = client.produce(
                    TopicPartition(name, partition), batch(b"by-user"), node_id=leader
                )
                assert result is not None
                answers[leader] = result.error_code
            return answers

        def described_by() -> dict[int, ErrorCode]:
            return {
                b: client.metadata([name], node_id=b).topics[name].error_code
                for b in secured.broker_ids
            }

        assert set(produce_everywhere().values()) == {ErrorCode.NONE}
        assert set(described_by().values()) == {ErrorCode.NONE}
        written = secured.end_offsets(name)
        assert sum(written) == sum(ends) + len(leaders)

        removed = secured.acls("remove", "--allow-principal", principal, "--topic", name)
        assert "WRITE" in removed
        started = time.monotonic()
        wait_until(
            lambda: set(described_by().values()) == {ErrorCode.TOPIC_AUTHORIZATION_FAILED},
            5,
            "every broker to refuse DESCRIBE after `tidelog acls remove`",
        )
        wait_until(
            lambda: set(produce_everywhere().values()) == {ErrorCode.TOPIC_AUTHORIZATION_FAILED},
            5,
            "every leader to refuse WRITE after `tidelog acls remove`",
        )
        assert time.monotonic() - started < 5
    assert guarded.accept_written() == written


# --- ZooKeeper --------------------------------------------------------------------------------


@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)
def test_zookeeper_is_read_only_for_strangers(secured: Secured, guarded: Guarded) -> None:
    name = guarded.name
    connect = secured.cluster.zookeeper_connect
    assert connect is not None
    zk = KazooClient(hosts=connect, timeout=10)
    zk.start(timeout=10)
    try:
        assert sorted(zk.get_children("/brokers/ids")) == [str(b) for b in secured.broker_ids]
        registration, _ = zk.get(f"/brokers/ids/{secured.broker_ids[0]}")
        assert b"SASL_SSL://" in registration
        assignment, _ = zk.get(f"/brokers/topics/{name}")
        with pytest.raises(NoAuthError):
            zk.set(f"/brokers/topics/{name}", b'{"version":3,"partitions":{}}')
        with pytest.raises(NoAuthError):
            zk.create(f"/brokers/topics/{unique('planted')}", b"{}")
        with pytest.raises(NoAuthError):
            zk.delete(f"/brokers/topics/{name}", recursive=True)
        with pytest.raises(NoAuthError):
            zk.get("/config/users/admin")
        assert zk.get(f"/brokers/topics/{name}")[0] == assignment
    finally:
        zk.stop()
        zk.close()
    assert name in secured.topic_names()
