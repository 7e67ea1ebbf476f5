"""Controlled shutdown (rule 12; Kafka's ControlledShutdown, API 7): before it stops, a broker
asks the controller to move its leaderships away, bounded in time, and stops asking as soon
as they cannot move however often it asks: no controller elected, no other live broker, or
(this broker being the controller) every other broker stopping too."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from tidelog.aio import wait_for
from tidelog.client.errors import ClientError
from tidelog.controller.controller import Controller
from tidelog.errors import ErrorCode
from tidelog.model import BrokerId
from tidelog.protocol import control
from tidelog.server.cluster.controller_connection import (
    ControllerConnection,
    NoControllerError,
    error_code_of,
)
from tidelog.server.cluster.metadata_cache import ClusterMetadataCache
from tidelog.server.replica.manager import ReplicaManager
from tidelog.zk import ZkClient, ZkError

log = logging.getLogger(__name__)

#: How long a stopping broker asks the controller to move its leaderships (Kafka bounds it
#: by controlled.shutdown.max.retries; deploy/tidelog.service's TimeoutStopSec exceeds it).
CONTROLLED_SHUTDOWN_TIMEOUT_S: Final = 10.0
#: How often (every 0.1 s) to look whether the LeaderAndIsr that demotes us has arrived.
_DEMOTION_CHECKS = 50
#: The longest wait for that LeaderAndIsr after the controller said yes.
DEMOTION_WAIT_S: Final = _DEMOTION_CHECKS * 0.1
#: Pause between two attempts.
_RETRY_PAUSE_S = 0.5


class ControlledShutdown:
    """Asks the controller (in process when it is this broker's own, else over the
    controller connection) to move this broker's leaderships away."""

    def __init__(
        self,
        *,
        broker_id: BrokerId,
        replica_manager: ReplicaManager,
        metadata: ClusterMetadataCache,
        connection: ControllerConnection,
        controller: Callable[[], Controller | None],
        zookeeper: Callable[[], ZkClient | None],
        broker_epoch: Callable[[], int],
    ) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.connection = connection
        self.controller = controller
        self.zookeeper = zookeeper
        self.broker_epoch = broker_epoch

    async def run(self, timeout_s: float) -> None:
        """Rule 12: ask the controller to move our leaderships away, bounded in time."""
        if self.zookeeper() is None or self.broker_epoch() < 0:
            return  # never registered: nothing to hand over
        deadline = asyncio.get_running_loop().time() + timeout_s
        failed = False
        while asyncio.get_running_loop().time() < deadline:
            try:
                error, remaining = await wait_for(
                    # After a failed attempt the controller may have moved (or resigned, its
                    # broker stopping too): ZooKeeper says, our metadata may not yet.
                    self._ask(ask_zookeeper=failed),
                    max(0.1, deadline - asyncio.get_running_loop().time()),
                )
            except NoControllerError as exc:
                # Nobody can move our leaderships: retrying only delays the stop (Kafka's
                # retries end the same way). When every broker stops at once, the last
                # controller resigned and the others no longer compete (withdraw_candidacy).
                log.info("controlled shutdown: %s; stopping without it", exc)
                return
            except (ClientError, OSError, TimeoutError, ZkError) as exc:
                log.info("controlled shutdown: %s", exc)
                error, remaining = ErrorCode.UNKNOWN_SERVER_ERROR, -1
            failed = error != ErrorCode.NONE
            if error == ErrorCode.NONE and remaining == 0:
                log.info("controlled shutdown succeeded")
                await self._await_demotion()
                return
            if error == ErrorCode.NONE and (why := self._no_handover(remaining)) is not None:
                log.info("controlled shutdown: %s", why)
                return
            await asyncio.sleep(_RETRY_PAUSE_S)
        log.warning("controlled shutdown did not complete in %.0f s; stopping anyway", timeout_s)

    async def _await_demotion(self) -> None:
        """Let the LeaderAndIsr that demotes us arrive before the sockets close (at most
        5 s): until no partition with other replicas is led here."""
        for _ in range(_DEMOTION_CHECKS):
            if not any(
                h.partition.is_leader and len(h.partition.replicas) > 1
                for h in self.replica_manager.partitions.values()
            ):
                break
            await asyncio.sleep(0.1)

    def _no_handover(self, remaining: int) -> str | None:
        """Why the ``remaining`` leaderships cannot move, however often we ask (None: they
        may). Kafka retries controlled.shutdown.max.retries times; here retrying would only
        delay the stop: the last broker of a cluster stopping one by one, and the controller
        of a cluster stopped at once, would each wait the whole timeout."""
        if not set(self.metadata.brokers) - {self.broker_id}:
            return f"no other live broker to lead {remaining} partition(s); stopping"
        controller = self.controller()
        if (
            remaining > 0
            and controller is not None
            and controller.is_active
            and not controller.electable_besides(self.broker_id)
        ):
            return f"{remaining} leaderships stay here, every other broker is stopping too"
        return None

    async def _ask(self, *, ask_zookeeper: bool) -> tuple[ErrorCode, int]:
        """One attempt: the answer's error and how many leaderships remain here."""
        controller = self.controller()
        if controller is not None and controller.is_active:
            result = await controller.controlled_shutdown(self.broker_id, self.broker_epoch())
            return result.error, len(result.remaining)
        conn = await self.connection.get(ask_zookeeper=ask_zookeeper)
        response = await conn.send(
            control.ControlledShutdownRequest(
                broker_id=self.broker_id, broker_epoch=self.broker_epoch()
            ),
            timeout_s=10.0,
        )
        return error_code_of(response.error_code), len(response.remaining_partitions)


__all__ = ["CONTROLLED_SHUTDOWN_TIMEOUT_S", "DEMOTION_WAIT_S", "ControlledShutdown"]
