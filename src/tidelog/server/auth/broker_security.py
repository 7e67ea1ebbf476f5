"""The broker's security, assembled (issue 20): listeners, logins, credentials, ACLs.

``BrokerSecurity`` is built from the config before anything listens (every mistake stops
the broker with the key named) and started once the ZooKeeper session is open:

1. Listeners: ``tidelog.server.network.listeners`` (one TLS context per SSL/SASL_SSL listener).
2. SASL: one ``SaslServerAuthenticator`` per connection on a SASL listener
   (``tidelog.server.network.sasl``). SCRAM credentials come from ``/config/users`` through an
   in-memory cache kept current by watches (``tidelog.zk.users``); a login never
   waits for ZooKeeper. Without ZooKeeper (a single broker) only PLAIN can log in.
3. Authorization: ``authorizer.class.name`` picks the ACL authorizer
   (``tidelog.server.auth.authorizer``), its ACLs in ZooKeeper (in memory on a single broker
   without ZooKeeper: lost at restart). None configured: every principal may do
   everything, as in Kafka.
4. APIs: SaslHandshake/SaslAuthenticate on a connection that needs no (more) login answer
   ILLEGAL_SASL_STATE, as Kafka's KafkaApis does. The ACL and SCRAM credential APIs
   (``tidelog.server.apis.acl_apis``, ``scram_apis``) are handler groups of their own over
   what this exposes: ``authorizer``, ``authorize_cluster`` and ``user_store``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kio.index import load_response_schema

from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.protocol.messages import build
from tidelog.security.acls import AclOperation, ResourceType
from tidelog.security.scram import ScramCredential, ScramMechanism
from tidelog.server.auth.authorizer import authorizer_from_config
from tidelog.server.auth.credentials import MemoryUserCredentialStore, UserCredentialStore
from tidelog.server.config.broker_config import BrokerConfig, Endpoint
from tidelog.server.network.listeners import (
    ListenerSecurity,
    enabled_mechanisms,
    listener_security,
    plain_users,
)
from tidelog.server.network.sasl import SaslAuthenticatorFactory
from tidelog.zk import ZkClient
from tidelog.zk.users import UserCredentialCache, ZkUserCredentialStore

log = logging.getLogger(__name__)

Handler = Callable[[Any, Any], Any]


class BrokerSecurity:
    """Rules 1-4 for one broker."""

    def __init__(self, config: BrokerConfig, *, clustered: bool) -> None:
        self.config = config
        self.clustered = clustered
        self.listeners: list[ListenerSecurity] = [
            listener_security(config, e) for e in config.listeners
        ]
        # Without ZooKeeper (a single broker) the ACLs are kept in memory only.
        self.authorizer = authorizer_from_config(
            config.get_str("authorizer.class.name"),
            config.get_str("super.users"),
            config.get_bool("allow.everyone.if.no.acl.found"),
        )
        # SCRAM credentials: ZooKeeper's /config/users behind an in-memory cache in a
        # cluster; in memory only (lost at restart) on a single broker without ZooKeeper.
        self.credentials: UserCredentialCache | None = UserCredentialCache() if clustered else None
        self._memory_users = MemoryUserCredentialStore()
        #: Where the SCRAM credential APIs read and write: memory until ``start`` opens
        #: ZooKeeper's ``/config/users`` (a cluster broker).
        self.user_store: UserCredentialStore = self._memory_users
        sasl_listeners = [s.endpoint for s in self.listeners if s.endpoint.uses_sasl]
        self._sasl: SaslAuthenticatorFactory | None = None
        if sasl_listeners:
            mechanisms = {e.name: enabled_mechanisms(config, e.name) for e in sasl_listeners}
            all_mechanisms = sorted({m for ms in mechanisms.values() for m in ms})
            users = {e.name: plain_users(config, e.name) for e in sasl_listeners}
            for e in sasl_listeners:
                if "PLAIN" in mechanisms[e.name] and not users[e.name]:
                    log.warning(
                        "listener %s enables PLAIN but its JAAS config lists no "
                        'user_<name>="<password>": no PLAIN login can succeed',
                        e.name,
                    )
            self._sasl = SaslAuthenticatorFactory(
                enabled_mechanisms=all_mechanisms,
                plain_users=users,
                scram_lookup=self._scram_lookup,
                max_receive_size=config.get_int("sasl.server.max.receive.size"),
            )
            self._mechanisms = mechanisms

    def _scram_lookup(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        if self.credentials is None:
            return self._memory_users.lookup(user, mechanism)
        return self.credentials.lookup(user, mechanism)

    def new_authenticator(self, endpoint: Endpoint) -> Any:
        """A fresh SASL exchange for a connection on ``endpoint`` (None: not a SASL one)."""
        if not endpoint.uses_sasl or self._sasl is None:
            return None
        return self._sasl.new(endpoint.name)

    async def start(self, zk: ZkClient | None) -> None:
        """Load credentials and ACLs and keep them current (rules 2-3)."""
        if zk is None:
            return
        if self.credentials is not None:
            await self.credentials.start(zk)
            self.user_store = ZkUserCredentialStore(zk)
        if self.authorizer is not None:
            await self.authorizer.start(zk)

    async def stop(self) -> None:
        if self.credentials is not None:
            await self.credentials.stop()
        if self.authorizer is not None:
            await self.authorizer.close()

    def handlers(self) -> dict[int, Handler]:
        """Rule 4: SaslHandshake and SaslAuthenticate after the login (or without SASL)."""
        return {
            ApiKey.SASL_HANDSHAKE: lambda header, _body: _illegal_sasl_state(
                header, {"mechanisms": []}
            ),
            ApiKey.SASL_AUTHENTICATE: lambda header, _body: _illegal_sasl_state(
                header,
                {
                    "error_message": "SaslAuthenticate request received after successful "
                    "authentication, or on a listener without SASL",
                },
            ),
        }

    def authorize_cluster(self, operation: str) -> bool:
        if self.authorizer is None:
            return True
        return bool(
            self.authorizer.authorize(
                AclOperation[operation], ResourceType.CLUSTER, "kafka-cluster"
            )
        )


def _illegal_sasl_state(header: RequestHeader, data: dict[str, Any]) -> Any:
    """``header``'s response (of its version) answering ILLEGAL_SASL_STATE with ``data``."""
    schema: type[Any] = load_response_schema(header.api_key, header.api_version)
    return build(schema, {"error_code": ErrorCode.ILLEGAL_SASL_STATE, **data})
