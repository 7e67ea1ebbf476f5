"""A client's security settings from Kafka's client properties (issue 20).

One properties file (``--command-config``, Spark's ``kafka.*`` options) serves every
client: Java's names and librdkafka's are both read.

Rules:

1. ``security.protocol``: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL, any case.
2. SASL needs ``sasl.mechanism`` (Java's default GSSAPI is not offered; tidelog's default is
   PLAIN) and credentials: librdkafka's ``sasl.username``/``sasl.password``, or Java's
   ``sasl.jaas.config`` with ``username="..." password="..."`` options.
3. TLS settings go to ``tidelog.security.tls.client_context_from_properties`` (Java's
   ``ssl.truststore.location``/``ssl.keystore.location`` as PEM, or librdkafka's
   ``ssl.ca.location``/``ssl.certificate.location``/``ssl.key.location``).
4. A setting that makes no sense for the protocol (SASL keys with SSL) is ignored, as the
   Kafka clients ignore it; a missing one the protocol needs is a ``SecurityConfigError``.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from tidelog.security.errors import SecurityConfigError
from tidelog.security.plain import parse_jaas_config
from tidelog.security.tls import client_context_from_properties

PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How a client connects: TLS context (None: plaintext) and SASL login (None: none)."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False)
    sasl_mechanism: str | None = None
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        """Rules 1-4."""
        protocol = (props.get("security.protocol") or "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise SecurityConfigError(
                "security.protocol", f"{protocol!r} is not one of {', '.join(PROTOCOLS)}"
            )
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            context = client_context_from_properties(props)
        if not protocol.startswith("SASL_"):
            return cls(protocol, context)
        mechanism = props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "PLAIN"
        mechanism = mechanism.strip().upper()
        if mechanism not in MECHANISMS:
            raise SecurityConfigError(
                "sasl.mechanism", f"{mechanism!r} is not one of {', '.join(MECHANISMS)}"
            )
        username = props.get("sasl.username", "")
        password = props.get("sasl.password", "")
        jaas = props.get("sasl.jaas.config", "")
        if jaas and not username:
            options = parse_jaas_config(jaas, key="sasl.jaas.config").options
            username = options.get("username", "")
            password = options.get("password", "")
        if not username:
            raise SecurityConfigError(
                "sasl.username",
                f"{protocol} needs credentials: sasl.username and sasl.password, or "
                'sasl.jaas.config with username="..." password="..."',
            )
        return cls(protocol, context, mechanism, username, password)


PLAINTEXT: Final = ClientSecurity()
