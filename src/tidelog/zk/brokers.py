"""Broker registration and controller election on ZooKeeper (Kafka's ``KafkaZkClient``).

1. Broker registration is an ephemeral ``/brokers/ids/<id>``; the broker epoch is its czxid,
   so every new registration has a larger epoch. A node of our id left by a *previous*
   session (a restarted broker) is waited out until that session expires; one owned by our
   own session (a create that succeeded before a connection loss) is kept. After a session
   expiry the registration is redone (``SessionEvent.REESTABLISHED``).
2. Controller election creates the ephemeral ``/controller`` and bumps ``/controller_epoch``
   in ONE multi-op whose setData is conditional on the epoch node's version (Kafka's
   ``registerControllerAndIncrementControllerEpoch``). The winner remembers the epoch node's
   new version (``ControllerSeat``); all its later writes are multi-ops that *check* that
   version first, so a controller that lost its seat (a zombie) can no longer write (rule 10;
   KIP-143 fencing).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kazoo.exceptions import (
    NodeExistsError,
    NoNodeError,
)

from tidelog.model import BrokerId, ControllerEpoch
from tidelog.zk import znodes
from tidelog.zk.errors import BrokerIdInUseError
from tidelog.zk.session import Watch, ZkSession
from tidelog.zk.znodes import (
    BrokerRegistration,
    ControllerRegistration,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LiveBroker:
    """A registered broker: its registration data and its broker epoch (the czxid)."""

    registration: BrokerRegistration
    broker_epoch: int

    @property
    def broker_id(self) -> BrokerId:
        return self.registration.broker_id


@dataclass(frozen=True, slots=True)
class ControllerSeat:
    """What the winner of a controller election holds.

    ``epoch_zk_version`` is the version of ``/controller_epoch`` after our bump: every
    controller write checks it, which fences a controller that has been replaced.
    """

    broker_id: BrokerId
    controller_epoch: ControllerEpoch
    epoch_zk_version: int


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """``seat`` when we won; otherwise ``current_controller`` is who holds ``/controller``
    (None when it vanished in between: watch and try again)."""

    seat: ControllerSeat | None
    current_controller: BrokerId | None = None


def _setter(event: threading.Event) -> Callable[[Any], None]:
    return lambda _watched: event.set()


class BrokerZnodes(ZkSession):
    """Broker registration (``/brokers/ids``) and the controller seat (``/controller``,
    ``/controller_epoch``) on one session."""

    _registration: BrokerRegistration | None = None
    _broker_epoch: int | None = None

    @property
    def broker_epoch(self) -> int | None:
        """The broker epoch of our current registration (None before ``register_broker``)."""
        return self._broker_epoch

    async def watch_brokers(self, callback: Callable[[frozenset[BrokerId]], None]) -> Watch:
        """The set of registered broker ids, now and on every change."""
        return await self.watch_children(
            znodes.BROKER_IDS_PATH,
            lambda ids: callback(frozenset(BrokerId(int(i)) for i in ids if i.isdigit())),
        )

    async def watch_controller(self, callback: Callable[[BrokerId | None], None]) -> Watch:
        """The active controller's broker id (None while there is none), now and on change."""

        def decode(data: bytes | None, _version: int) -> None:
            if data is None:
                callback(None)
                return
            try:
                callback(ControllerRegistration.decode(data).broker_id)
            except znodes.ZNodeDecodeError:
                log.exception("unreadable /controller node")
                callback(None)

        return await self.watch_data(znodes.CONTROLLER_PATH, decode)

    async def _register_again(self) -> int | None:
        if self._registration is None:
            return None
        return await self.register_broker(self._registration)

    # -- brokers ------------------------------------------------------------------------------

    async def register_broker(
        self, registration: BrokerRegistration, *, wait_for_stale_s: float | None = None
    ) -> int:
        """Create our ephemeral ``/brokers/ids/<id>``; returns the broker epoch (its czxid).

        A node of our id from another session (our previous incarnation) is waited out for up
        to ``wait_for_stale_s`` (default: session timeout + 5 s, the time ZooKeeper needs to
        expire it); then BrokerIdInUseError. The registration is remembered and redone with a
        new epoch after a session expiry (``SessionEvent.REESTABLISHED``).
        """
        wait_s = (
            wait_for_stale_s
            if wait_for_stale_s is not None
            else self.session_timeout_ms / 1000.0 + 5.0
        )
        epoch = await self._call(self._register_blocking, registration, wait_s)
        self._registration = registration
        self._broker_epoch = epoch
        return epoch

    def _register_blocking(self, registration: BrokerRegistration, wait_s: float) -> int:
        path = znodes.broker_path(registration.broker_id)
        data = replace(registration, timestamp_ms=int(time.time() * 1000)).encode()
        deadline = time.monotonic() + wait_s
        while True:
            try:
                _, stat = self._kz.retry(
                    self._kz.create, path, data, ephemeral=True, include_data=True
                )
                return int(stat.czxid)
            except NodeExistsError:
                pass
            gone = threading.Event()
            stat = self._kz.retry(self._kz.exists, path, _setter(gone))
            if stat is None:
                continue  # deleted in between: try again
            if int(stat.ephemeralOwner) == self.session_id:
                # Our own create succeeded before a connection loss (Kafka's
                # checkedEphemeralCreate): the node is ours.
                return int(stat.czxid)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerIdInUseError(
                    f"{path} is held by another live ZooKeeper session "
                    f"(0x{int(stat.ephemeralOwner):x}): is another broker running with "
                    f"broker.id={registration.broker_id}?"
                )
            log.info("waiting for a stale registration at %s to expire", path)
            gone.wait(timeout=remaining)

    async def get_live_brokers(self) -> dict[BrokerId, LiveBroker]:
        """Every registered broker with its broker epoch (czxid), read in one pipeline."""

        def run() -> dict[BrokerId, LiveBroker]:
            ids = self._kz.retry(self._kz.get_children, znodes.BROKER_IDS_PATH)
            pending = {
                BrokerId(int(i)): self._kz.get_async(znodes.broker_path(int(i)))
                for i in ids
                if i.isdigit()
            }
            brokers: dict[BrokerId, LiveBroker] = {}
            for broker_id, result in pending.items():
                try:
                    data, stat = result.get()
                except NoNodeError:
                    continue  # died in between
                registration = BrokerRegistration.decode(broker_id, data)
                brokers[broker_id] = LiveBroker(registration, int(stat.czxid))
            return brokers

        # Reads are idempotent: the whole pipeline is retried across a connection loss.
        return await self._call(self._kz.retry, run)

    # -- controller ---------------------------------------------------------------------------

    async def get_controller(self) -> BrokerId | None:
        def run() -> BrokerId | None:
            try:
                data, _ = self._kz.retry(self._kz.get, znodes.CONTROLLER_PATH)
            except NoNodeError:
                return None
            return ControllerRegistration.decode(data).broker_id

        return await self._call(run)

    async def get_controller_epoch(self) -> tuple[ControllerEpoch, int] | None:
        """(epoch, znode version) of ``/controller_epoch``, or None before any election."""

        def run() -> tuple[ControllerEpoch, int] | None:
            try:
                data, stat = self._kz.retry(self._kz.get, znodes.CONTROLLER_EPOCH_PATH)
            except NoNodeError:
                return None
            return znodes.decode_controller_epoch(data), int(stat.version)

        return await self._call(run)

    async def try_become_controller(self, broker_id: BrokerId) -> ElectionResult:
        """Try to create ``/controller``; on success the controller epoch is bumped atomically."""
        return await self._call(self._elect_blocking, broker_id)

    def _elect_blocking(self, broker_id: BrokerId) -> ElectionResult:
        kz = self._kz
        while True:
            try:
                data, stat = kz.retry(kz.get, znodes.CONTROLLER_EPOCH_PATH)
                epoch, version = znodes.decode_controller_epoch(data), int(stat.version)
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    kz.retry(
                        kz.create,
                        znodes.CONTROLLER_EPOCH_PATH,
                        znodes.encode_controller_epoch(znodes.INITIAL_CONTROLLER_EPOCH),
                    )
                continue
            new_epoch = ControllerEpoch(epoch + 1)
            registration = ControllerRegistration(
                broker_id=broker_id, timestamp_ms=int(time.time() * 1000)
            )

            def build(
                tx: Any,
                data: bytes = registration.encode(),
                epoch_data: bytes = znodes.encode_controller_epoch(new_epoch),
                v: int = version,
            ) -> None:
                tx.create(znodes.CONTROLLER_PATH, data, ephemeral=True)
                tx.set_data(znodes.CONTROLLER_EPOCH_PATH, epoch_data, v)

            results = self._commit(build)
            if not any(isinstance(r, Exception) for r in results):
                return ElectionResult(
                    ControllerSeat(broker_id, new_epoch, int(results[1].version)), broker_id
                )
            if isinstance(results[0], NodeExistsError):
                holder = kz.retry(kz.exists, znodes.CONTROLLER_PATH)
                if holder is not None and int(holder.ephemeralOwner) == self.session_id:
                    # Our own earlier commit went through before a connection loss.
                    data, stat = kz.retry(kz.get, znodes.CONTROLLER_EPOCH_PATH)
                    return ElectionResult(
                        ControllerSeat(
                            broker_id, znodes.decode_controller_epoch(data), int(stat.version)
                        ),
                        broker_id,
                    )
                try:
                    data, _ = kz.retry(kz.get, znodes.CONTROLLER_PATH)
                except NoNodeError:
                    return ElectionResult(None, None)
                return ElectionResult(None, ControllerRegistration.decode(data).broker_id)
            # The epoch moved under us (a concurrent election): read again and retry.

    async def resign_controller(self, seat: ControllerSeat) -> bool:
        """Delete ``/controller`` if it is still ours (fenced by the epoch version)."""

        def run() -> bool:
            def build(tx: Any) -> None:
                tx.check(znodes.CONTROLLER_EPOCH_PATH, seat.epoch_zk_version)
                tx.delete(znodes.CONTROLLER_PATH)

            results = self._commit(build)
            return not any(isinstance(r, Exception) for r in results)

        return await self._call(run)
