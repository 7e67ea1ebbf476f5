"""Fixtures of the security tests (issue 20): secured local clusters (``LocalCluster(...,
security=MODE)``) as real processes, and what the tests need around them.

- ``secured``: one cluster per mode and test module, chosen by indirect parametrization
  (``@pytest.mark.parametrize("secured", ["sasl_ssl"], indirect=True)``). pytest groups a
  module's tests by the mode, so only one cluster runs at a time. ssl and sasl_plaintext
  have one broker; sasl_ssl three (topics with RF=3); ``"MODE/N"`` asks for N. Processes
  are stopped by PID (``LocalCluster.stop``) and the cluster lives in a tmp dir.
- ``Secured``: the admin's client settings for librdkafka, the ``tidelog`` CLI on the
  cluster's directory, SCRAM users and client certificates for new principals, end offsets
  and records as the admin sees them (for "nothing was written"), and the brokers' log
  lines written after a mark (for "the broker said why").
- ``RawConn``: one bare connection (TLS or not) for exact bytes: Kafka frames built by
  tidelog's codec, or anything else.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import wait_until
from tests.integration.rawclient import RawSocket
from tidelog.cli.launcher import LocalCluster
from tidelog.protocol.apis import ApiKey
from tidelog.security.certs import generate_ca, issue_certificate, keystore_pem

#: Brokers per mode (the brief: one is enough for ssl and sasl_plaintext).
BROKERS = {"ssl": 1, "sasl_plaintext": 1, "sasl_ssl": 3}
#: Kept light: a small __consumer_offsets, no initial rebalance delay.
OVERRIDES = {
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --- broker logs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LogMark:
    """Where each broker's log ended when the mark was taken."""

    offsets: Mapping[Path, int]

    def lines(self) -> list[str]:
        """Every line the brokers wrote since the mark."""
        out: list[str] = []
        for path, offset in self.offsets.items():
            with path.open("rb") as f:
                f.seek(offset)
                out += f.read().decode("utf-8", "replace").splitlines()
        return out

    def matching(self, pattern: str) -> list[str]:
        regex = re.compile(pattern)
        return [line for line in self.lines() if regex.search(line)]

    def wait_for(self, pattern: str, timeout: float = 10.0, count: int = 1) -> list[str]:
        """At least ``count`` new lines matching ``pattern`` (a regex); they are returned."""
        found: list[str] = []

        def seen() -> bool:
            found[:] = self.matching(pattern)
            return len(found) >= count

        wait_until(seen, timeout, f"a broker log line matching {pattern!r}")
        return found


# --- the cluster ----------------------------------------------------------------------------


class Secured:
    """A running secured ``LocalCluster`` and the admin's ways into it."""

    def __init__(self, cluster: LocalCluster, scratch: Path) -> None:
        self.cluster = cluster
        self.scratch = scratch
        self.mode = cluster.security_mode
        security = cluster.security
        assert security is not None
        self.protocol = security.protocol
        self.admin_password = security.admin_password
        self.pki_dir = security.pki_dir
        self.ca = security.pki_dir / "ca.pem"
        self.directory = cluster.directory

    # -- addresses -------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers

    @property
    def broker_ids(self) -> list[int]:
        return [b.broker_id for b in self.cluster._require_state().brokers]

    def port(self, broker_id: int = 1) -> int:
        return self.cluster.broker(broker_id).port

    @property
    def replication_factor(self) -> int:
        return min(3, len(self.broker_ids))

    @property
    def uses_tls(self) -> bool:
        return self.mode in ("ssl", "sasl_ssl")

    def tls_context(self, *, cert: Path | None = None) -> ssl.SSLContext | None:
        """A client TLS context trusting the cluster's CA (None on SASL_PLAINTEXT); on SSL
        the admin's certificate unless ``cert`` names another keystore."""
        if not self.uses_tls:
            return None
        context = ssl.create_default_context(cafile=str(self.ca))
        if self.mode == "ssl":
            keystore = cert or self.pki_dir / "client-admin.pem"
            context.load_cert_chain(str(keystore))
        return context

    def log_mark(self) -> LogMark:
        paths = [self.cluster.broker(b).output_path for b in self.broker_ids]
        return LogMark({p: p.stat().st_size for p in paths})

    def broker_alive(self, broker_id: int = 1) -> bool:
        return self.cluster.broker_state(broker_id) == "running"

    def answers_api_versions(self, broker_id: int = 1) -> bool:
        """One ApiVersions round trip (over TLS when the listener is), on a new connection
        that is closed again (launcher.api_versions_round_trip leaks its TLS socket)."""
        try:
            with RawConn(self.port(broker_id), self.tls_context(), timeout=5) as conn:
                body = conn.call(ApiKey.API_VERSIONS, 0, {})
        except (OSError, AssertionError):
            return False
        return bool(body.error_code == 0 and body.api_keys)

    # -- client settings -------------------------------------------------------------------------

    def tls_conf(self, *, ca: bool = True) -> dict[str, str]:
        return {"ssl.ca.location": str(self.ca)} if ca and self.uses_tls else {}

    def sasl_conf(
        self, user: str, password: str, mechanism: str = "SCRAM-SHA-256", **extra: str
    ) -> dict[str, str]:
        """librdkafka settings for a SASL login on this cluster."""
        assert self.mode.startswith("sasl_")
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": self.protocol,
            "sasl.mechanisms": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            **self.tls_conf(),
            **extra,
        }

    def cert_conf(self, keystore: Path, *, ca: bool = True, **extra: str) -> dict[str, str]:
        """librdkafka settings for mutual TLS with ``keystore`` (key then certificate)."""
        assert self.mode == "ssl"
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SSL",
            "ssl.certificate.location": str(keystore),
            "ssl.key.location": str(keystore),
            **self.tls_conf(ca=ca),
            **extra,
        }

    def admin_conf(self, **extra: str) -> dict[str, str]:
        if self.mode == "ssl":
            return self.cert_conf(self.pki_dir / "client-admin.pem", **extra)
        return self.sasl_conf("admin", self.admin_password, "SCRAM-SHA-512", **extra)

    # -- principals ------------------------------------------------------------------------------

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``tidelog ARGS --dir <cluster dir>`` (the admin's client.properties)."""
        result = subprocess.run(
            [sys.executable, "-m", "tidelog", *args, "--dir", str(self.directory)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check:
            assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result

    def add_user(self, name: str, password: str, mechanism: str = "SCRAM-SHA-256") -> None:
        """A SCRAM user, added as an operator would (``tidelog users add``)."""
        path = self.scratch / f"password-{name}-{uuid.uuid4().hex[:6]}"
        path.write_text(password + "\n", encoding="utf-8")
        os.chmod(path, 0o600)
        self.cli("users", "add", name, "--password-file", str(path), "--mechanism", mechanism)

    def acls(self, action: str, *args: str) -> str:
        return self.cli("acls", action, *args).stdout

    def issue_client_cert(
        self,
        common_name: str,
        *,
        foreign_ca: bool = False,
        not_before: datetime.datetime | None = None,
        not_after: datetime.datetime | None = None,
    ) -> Path:
        """A client keystore ``CN=<common_name>`` signed by the cluster's CA (or a new,
        foreign one)."""
        if foreign_ca:
            ca_key, ca_cert = generate_ca("not the cluster's CA")
        else:
            ca_key = (self.pki_dir / "ca-key.pem").read_bytes()
            ca_cert = self.ca.read_bytes()
        key, cert = issue_certificate(
            ca_key,
            ca_cert,
            common_name,
            server=False,
            not_before=not_before,
            not_after=not_after,
        )
        path = self.scratch / f"{common_name}-{uuid.uuid4().hex[:6]}.pem"
        path.write_bytes(keystore_pem(key, cert))
        os.chmod(path, 0o600)
        return path

    # -- topics and data, as the admin -----------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1) -> str:
        admin = AdminClient(self.admin_conf())
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=self.replication_factor)]
        )
        futures[name].result(timeout=30)

        def leaders() -> bool:
            topic = admin.list_topics(name, timeout=10).topics[name]
            return (
                topic.error is None
                and len(topic.partitions) == partitions
                and all(p.leader >= 0 for p in topic.partitions.values())
            )

        wait_until(leaders, 30, f"leaders for every partition of {name}")
        return name

    def topic_names(self) -> set[str]:
        admin = AdminClient(self.admin_conf())
        return set(admin.list_topics(timeout=10).topics)

    def end_offsets(self, topic: str) -> list[int]:
        """Each partition's high watermark, as the admin reads it."""
        consumer = Consumer(self.admin_conf(**{"group.id": unique("admin-offsets")}))
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            return [
                consumer.get_watermark_offsets(CTopicPartition(topic, p), timeout=10)[1]
                for p in sorted(partitions)
            ]
        finally:
            consumer.close()

    def produce_as_admin(self, topic: str, values: Sequence[bytes]) -> None:
        producer = Producer(self.admin_conf(acks="all"))
        errors: list[object] = []
        for value in values:
            producer.produce(topic, value, on_delivery=lambda e, _m: e and errors.append(e))
        assert producer.flush(30) == 0
        assert not errors, errors

    def read_values(self, topic: str, timeout: float = 30.0) -> list[bytes]:
        """Every record of ``topic`` up to the end offsets, as the admin reads it."""
        ends = self.end_offsets(topic)
        consumer = Consumer(
            self.admin_conf(**{"group.id": unique("admin-read"), "enable.auto.commit": "false"})
        )
        consumer.assign([CTopicPartition(topic, p, 0) for p in range(len(ends))])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        try:
            while len(got) < sum(ends) and time.monotonic() < deadline:
                for message in consumer.consume(1000, 0.5):
                    assert message.error() is None, message.error()
                    got.append(message.value())
        finally:
            consumer.close()
        assert len(got) == sum(ends), (len(got), ends)
        return got


def start_secured(directory: Path, mode: str, brokers: int | None = None) -> Secured:
    size = brokers or BROKERS[mode]
    overrides = {**OVERRIDES, "offsets.topic.replication.factor": str(min(3, size))}
    cluster = LocalCluster(directory / "cluster", brokers=size, security=mode, overrides=overrides)
    cluster.start(timeout_s=120)
    scratch = directory / "scratch"
    scratch.mkdir(mode=0o700)
    return Secured(cluster, scratch)


@pytest.fixture(scope="module")
def secured(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    """The module's cluster of the mode given by indirect parametrization: ``"MODE"`` with
    ``BROKERS[MODE]`` brokers, or ``"MODE/N"`` with N."""
    mode, _, size = str(getattr(request, "param", "sasl_ssl")).partition("/")
    secured = start_secured(
        tmp_path_factory.mktemp(f"secure-{mode}"), mode, int(size) if size else None
    )
    try:
        yield secured
    finally:
        secured.cluster.stop()


# --- librdkafka: what the user sees ----------------------------------------------------------


def librdkafka_errors(
    conf: Mapping[str, str],
    topic: str,
    *,
    want: str | None = None,
    expect_delivery: bool = False,
    timeout: float = 15.0,
) -> tuple[list[Any], list[Any]]:
    """Produce one record with ``conf`` and collect what librdkafka reports: (error_cb
    errors, delivery reports: None for a delivered record, else its error).

    With ``expect_delivery`` it waits for the delivery report; otherwise until ``want`` (a
    regex) appears in an error of either kind, or the first error without ``want``. A
    record still queued then is purged, never retried."""
    client_errors: list[Any] = []
    delivery: list[Any] = []
    producer = Producer(
        {
            **conf,
            "acks": "all",
            "message.timeout.ms": str(int(timeout * 1000)),
            "error_cb": client_errors.append,
            "reconnect.backoff.ms": "200",
        }
    )
    producer.produce(topic, b"from-the-test", on_delivery=lambda e, _m: delivery.append(e))

    def reported() -> bool:
        producer.poll(0.1)
        if expect_delivery:
            return bool(delivery)
        texts = [str(e) for e in (*client_errors, *delivery) if e is not None]
        if want is None:
            return bool(texts)
        return any(re.search(want, t, re.IGNORECASE) for t in texts)

    try:
        wait_until(reported, timeout + 5, f"librdkafka to report {want or 'an outcome'}")
    finally:
        producer.purge()
        producer.flush(5)
    return client_errors, delivery


# --- a bare connection ----------------------------------------------------------------------


class RawConn(RawSocket):
    """One connection for exact bytes: Kafka frames from tidelog's codec, or anything."""

    client_id = "security-test"

    def __init__(
        self, port: int, tls: ssl.SSLContext | None = None, *, timeout: float = 10.0
    ) -> None:
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        try:
            sock = tls.wrap_socket(raw, server_hostname="127.0.0.1") if tls is not None else raw
        except BaseException:
            raw.close()
            raise
        super().__init__(sock)

    def __enter__(self) -> RawConn:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    frame = RawSocket.encode

    def closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True when the broker closes the connection (after any frames still pending)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                frame = self.recv_frame(timeout=max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                return False
            if frame is None:
                return True
        return False


def size_prefix(size: int) -> bytes:
    return struct.pack(">i", size)
