"""This broker's one connection to the active controller, for the requests a broker sends it
(AlterPartition, ControlledShutdown): to the controller the metadata cache names, or the one
``/controller`` in ZooKeeper names when asked to (after a failed attempt the controller may
have moved) or when the cache names none."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tidelog.client.connection import BrokerConnection
from tidelog.client.errors import ClientError
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId
from tidelog.security.client_config import ClientSecurity
from tidelog.server.cluster.metadata_cache import ClusterMetadataCache
from tidelog.server.cluster.peers import PeerAddress, listener_address
from tidelog.zk import ZkClient


class NoControllerError(ClientError):
    """No controller is elected (or its broker is not registered): nobody to ask."""


class ControllerConnection:
    """One connection to the controller, shared by every request to it: one connection
    attempt at a time (AlterPartition proposals of many partitions run concurrently, and
    each would otherwise open its own connection and leave the previous one unclosed)."""

    def __init__(
        self,
        *,
        broker_id: BrokerId,
        metadata: ClusterMetadataCache,
        zookeeper: Callable[[], ZkClient | None],
        peer_address: PeerAddress,
        listener_name: str,
        security: ClientSecurity,
    ) -> None:
        self.broker_id = broker_id
        self.metadata = metadata
        self.zookeeper = zookeeper
        self.peer_address = peer_address
        self.listener_name = listener_name
        self.security = security
        self.conn: BrokerConnection | None = None
        self._lock = asyncio.Lock()

    async def get(self, *, ask_zookeeper: bool = False) -> BrokerConnection:
        """A connection to the controller our metadata names, or with ``ask_zookeeper``
        (or none named) the one ``/controller`` names; ``NoControllerError`` when none is."""
        async with self._lock:
            return await self._connect(ask_zookeeper=ask_zookeeper)

    async def _connect(self, *, ask_zookeeper: bool) -> BrokerConnection:
        controller_id = self.metadata.controller_id
        if ask_zookeeper or controller_id < 0 or controller_id not in self.metadata.brokers:
            zk = self.zookeeper()
            if zk is None:
                raise NoControllerError("no controller known")
            found = await zk.get_controller()
            if found is None:
                raise NoControllerError("no controller elected")
            controller_id = found
            live = await zk.get_live_brokers()
            if controller_id not in live:
                raise NoControllerError(f"controller {controller_id} is not registered")
            reg = live[BrokerId(controller_id)].registration
            host, port = listener_address(reg, self.listener_name)
        else:
            b = self.metadata.brokers[controller_id]
            host, port = b.host, b.port
        host, port = self.peer_address(controller_id, host, port)
        conn = self.conn
        if conn is not None and not conn.is_closed and (conn.host, conn.port) == (host, port):
            return conn
        if conn is not None:
            await conn.close()
        self.conn = await BrokerConnection.connect(
            host, port, client_id=f"broker-{self.broker_id}", security=self.security
        )
        return self.conn

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


def error_code_of(value: int) -> ErrorCode:
    """The ``ErrorCode`` of a wire error code (UNKNOWN_SERVER_ERROR for one we do not know)."""
    try:
        return ErrorCode._value2member_map_[int(value)]  # type: ignore[return-value]
    except KeyError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


__all__ = ["ControllerConnection", "NoControllerError", "error_code_of"]
