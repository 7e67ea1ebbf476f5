"""Security for a local cluster: ``tidelog cluster up --security MODE`` (issue 20).

Modes: ``plaintext`` (the default: nothing changes), ``ssl``, ``sasl_plaintext``,
``sasl_ssl``. A secured local cluster is a small version of what docs/security.md walks an
operator through:

1. Secrets live in ``<dir>/security/`` (mode 0700): ``secrets.json`` (the admin's
   password and the brokers' ZooKeeper digest, generated once and reused by every restart)
   and, with TLS, ``pki/`` (a CA, a keystore per broker and one for the ``admin`` client,
   made by ``tidelog.security.certs``; reused while valid).
2. Each broker has one listener of the mode's protocol, used by clients and by the
   brokers themselves (``security.inter.broker.protocol``).
3. SASL: SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN are enabled. The brokers log in to each
   other as ``admin`` with SCRAM-SHA-512; ``admin``'s SCRAM credentials are written to
   ZooKeeper before any broker starts (as ``kafka-configs.sh --zookeeper`` bootstraps
   them) and PLAIN knows ``admin`` from the listener's JAAS config.
4. TLS: ``ssl.client.auth=required`` on SSL (the certificate is the identity) and
   ``none`` on SASL_SSL (the SASL login is); ``ssl.principal.mapping.rules`` maps a
   certificate's ``CN=x,...`` to ``User:x``, so the admin's certificate is ``User:admin``.
5. Authorization is on: the ACL authorizer, ``super.users=User:admin`` (and the brokers'
   own ``User:broker-N`` on SSL), nothing else allowed until ACLs say so.
6. ZooKeeper: ``zookeeper.set.acl=true`` with the digest credentials, so a client of the
   ZooKeeper port can read but not rewrite the cluster's state.
7. ``<dir>/client.properties`` (0600) holds the admin's client settings; `tidelog`
   commands without ``--bootstrap-server`` use it, and so can any Kafka client.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from tidelog.security.client_config import ClientSecurity
from tidelog.security.scram import ScramMechanism, make_credential
from tidelog.zk import ZkClient
from tidelog.zk.security import ZkAuth
from tidelog.zk.users import ZkUserCredentialStore

if TYPE_CHECKING:
    from tidelog.security.certs import LocalPki

MODES: Final = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
ADMIN: Final = "admin"
CLIENT_PROPERTIES: Final = "client.properties"
#: A CN=name certificate subject is the principal User:name (rule 4).
MAPPING_RULES: Final = "RULE:^CN=([^,]*).*$/$1/,DEFAULT"


@dataclass(frozen=True, slots=True)
class LocalSecurity:
    """What one secured local cluster uses (rules 1-7)."""

    mode: str
    directory: Path
    admin_password: str
    zk_digest: str

    @property
    def protocol(self) -> str:
        return self.mode.upper()

    @property
    def uses_tls(self) -> bool:
        return self.mode in ("ssl", "sasl_ssl")

    @property
    def uses_sasl(self) -> bool:
        return self.mode.startswith("sasl_")

    @property
    def pki_dir(self) -> Path:
        return self.directory / "pki"

    def _pki(self, broker_ids: Sequence[int]) -> LocalPki:
        # cryptography costs ~0.1 s to import: only secured clusters pay it.
        from tidelog.security.certs import generate_local_pki  # noqa: PLC0415

        return generate_local_pki(self.pki_dir, brokers=broker_ids, clients=(ADMIN,))

    def broker_properties(
        self, broker_id: int, port: int, broker_ids: Sequence[int]
    ) -> dict[str, str]:
        """Rules 2-6 for one broker."""
        protocol = self.protocol
        props = {
            "listeners": f"{protocol}://127.0.0.1:{port}",
            "security.inter.broker.protocol": protocol,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "zookeeper.set.acl": "true",
            "tidelog.zookeeper.digest": self.zk_digest,
        }
        super_users = [f"User:{ADMIN}"]
        if self.uses_tls:
            pki = self._pki(broker_ids)
            props.update(pki.broker_ssl_properties(broker_id))
            props["ssl.client.auth"] = "required" if self.mode == "ssl" else "none"
            props["ssl.principal.mapping.rules"] = MAPPING_RULES
            if self.mode == "ssl":
                super_users += [f"User:broker-{b}" for b in broker_ids]
        if self.uses_sasl:
            listener = protocol.lower()
            password = _jaas_quote(self.admin_password)
            props["sasl.enabled.mechanisms"] = "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"
            props["sasl.mechanism.inter.broker.protocol"] = "SCRAM-SHA-512"
            props[f"listener.name.{listener}.scram-sha-512.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{ADMIN}" password="{password}";'
            )
            props[f"listener.name.{listener}.plain.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="{ADMIN}" password="{password}" user_{ADMIN}="{password}";'
            )
        props["super.users"] = ";".join(super_users)
        return props

    def client_properties(self, broker_ids: Sequence[int] = ()) -> dict[str, str]:
        """The admin's client settings (rule 7), Java's names (librdkafka reads the SASL
        ones too)."""
        props = {"security.protocol": self.protocol}
        if self.uses_tls:
            pki = self._pki(broker_ids)
            if self.mode == "ssl":
                props.update(pki.client_ssl_properties(ADMIN))
            else:
                props["ssl.truststore.type"] = "PEM"
                props["ssl.truststore.location"] = str(pki.ca_cert)
        if self.uses_sasl:
            props["sasl.mechanism"] = "SCRAM-SHA-512"
            props["sasl.username"] = ADMIN
            props["sasl.password"] = self.admin_password
        return props

    def client_security(self) -> ClientSecurity:
        return ClientSecurity.from_properties(self.client_properties())

    def write_client_properties(self, cluster_dir: Path, broker_ids: Sequence[int]) -> Path:
        path = cluster_dir / CLIENT_PROPERTIES
        text = "".join(f"{k}={v}\n" for k, v in self.client_properties(broker_ids).items())
        _write_private(path, text)
        return path


def _jaas_quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(path, 0o600)


def prepare(cluster_dir: Path, mode: str) -> LocalSecurity | None:
    """Rule 1: the cluster's secrets, made once (None for plaintext)."""
    if mode not in MODES:
        raise ValueError(f"--security must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "plaintext":
        return None
    directory = cluster_dir / "security"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(directory, 0o700)
    secrets_path = directory / "secrets.json"
    stored: Mapping[str, str] = {}
    if secrets_path.exists():
        stored = json.loads(secrets_path.read_text(encoding="utf-8"))
    admin_password = stored.get("admin_password") or secrets.token_urlsafe(18)
    zk_digest = stored.get("zk_digest") or f"tidelog:{secrets.token_urlsafe(18)}"
    _write_private(
        secrets_path,
        json.dumps({"admin_password": admin_password, "zk_digest": zk_digest}, indent=2) + "\n",
    )
    return LocalSecurity(mode, directory, admin_password, zk_digest)


async def bootstrap_admin(zookeeper_connect: str, security: LocalSecurity) -> None:
    """Rule 3: the admin's SCRAM credentials in ZooKeeper before any broker starts,
    written with the brokers' digest identity (rule 6), so the znodes are theirs."""
    if not security.uses_sasl:
        return
    zk = await ZkClient.connect(
        zookeeper_connect, auth=ZkAuth.parse(security.zk_digest), set_acl=True
    )
    try:
        store = ZkUserCredentialStore(zk)
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            existing = await store.get(ADMIN)
            if mechanism in existing:
                continue
            credential = make_credential(mechanism, security.admin_password)
            await store.upsert(ADMIN, mechanism, credential)
    finally:
        await zk.close()
