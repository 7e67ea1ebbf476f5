"""Security: who a connection is and what it may do (docs/security.md).

Pure parts (no sockets, no event loop, no ZooKeeper), used by the broker's shells in
``tidelog.server``, the client in ``tidelog.client`` and the CLI:

    principal   KafkaPrincipal (``User:alice``), ANONYMOUS
    scram       SCRAM-SHA-256/512 (RFC 5802/7677): credentials, server and client exchanges
    plain       SASL PLAIN (RFC 4616) and the JAAS config strings that carry its users
    acls        ACL bindings, resource patterns and the ACL authorizer's decision
    tls         ssl.SSLContext from Kafka's ``ssl.*`` properties (PEM)
    x500        a certificate's subject DN as Java prints it (RFC 2253)
    ssl_principal  the principal a client certificate proves (KIP-371 mapping rules)
    certs       a CA and certificates for a local cluster (``cryptography``)
    client_config  a client's ``security.protocol``/``sasl.*``/``ssl.*`` properties

Exceptions: every failure here is a ``SecurityError`` (tidelog.errors.TidelogError);
``AuthenticationError`` is a failed login (the peer's fault: its answer is
SASL_AUTHENTICATION_FAILED), ``SecurityConfigError`` a bad property (the operator's).
"""
