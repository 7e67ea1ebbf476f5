"""This broker in ZooKeeper: the session (``zookeeper.connect``,
``zookeeper.session.timeout.ms``, digest ACLs with ``zookeeper.set.acl``) and the
``/brokers/ids/<id>`` registration of every advertised listener. The broker epoch is the
registration znode's czxid: a new one after each session expiry, when the ZooKeeper client
registers again (``SessionEvent.REESTABLISHED``)."""

from __future__ import annotations

from collections.abc import Mapping

from tidelog.model import BrokerId
from tidelog.server.config.broker_config import BrokerConfig
from tidelog.zk import ZkClient
from tidelog.zk.security import ZkAuth
from tidelog.zk.znodes import BrokerRegistration, EndPoint


async def open_session(config: BrokerConfig) -> ZkClient:
    """Open the ZooKeeper session the broker's config describes."""
    digest = config.get_str("tidelog.zookeeper.digest")
    return await ZkClient.connect(
        config.get_str("zookeeper.connect"),
        session_timeout_ms=config.get_int("zookeeper.session.timeout.ms"),
        connection_timeout_s=config.get_int("zookeeper.connection.timeout.ms") / 1000,
        auth=ZkAuth.parse(digest) if digest else None,
        set_acl=config.get_bool("zookeeper.set.acl"),
    )


def broker_registration(
    broker_id: BrokerId, config: BrokerConfig, bound_ports: Mapping[str, int]
) -> BrokerRegistration:
    """The registration of every advertised listener; an advertised port 0 is the port the
    listener bound (``bound_ports``, by listener name)."""
    return BrokerRegistration(
        broker_id=broker_id,
        endpoints=tuple(
            EndPoint(
                e.name,
                e.host,
                e.port or bound_ports.get(e.name, 0),
                e.security_protocol,
            )
            for e in config.advertised_listeners
        ),
        rack=config.get_str("broker.rack") or None,
    )


__all__ = ["broker_registration", "open_session"]
