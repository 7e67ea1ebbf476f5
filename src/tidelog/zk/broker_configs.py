"""Dynamic broker configs in ZooKeeper, as Kafka keeps them in ZooKeeper mode (KIP-226).

Layout (Kafka's ``AdminZkClient.changeBrokerConfig``)::

    /config/brokers/<broker id>          {"version":1,"config":{"log.retention.ms":"60000"}}
    /config/brokers/<default>            the same, for every broker (cluster-wide default)
    /config/changes/config_change_<seq>  {"version":2,"entity_path":"brokers/<id or <default>>"}

Rules and invariants:

1. Values are strings, stored as given. Kafka encrypts PASSWORD-typed values with
   ``password.encoder.secret`` before writing them; tidelog has no password encoder, and no
   sensitive key is dynamically updatable here, so nothing secret is written.
2. Every write is a read-modify-write with a compare-and-set on the znode's version
   (create when absent, delete when the config becomes empty); a lost race reads again and
   asks ``change`` again with what it read. After the write a ``/config/changes``
   notification is posted so Kafka brokers sharing the ZooKeeper see it. Notifications are
   never consumed or deleted here (the topic-config watcher in ``tidelog.server.cluster.node``
   and Kafka's purger own them).
3. ``BrokerConfigWatch`` keeps one data watch on this broker's znode and one on
   ``<default>``: each event carries the znode's whole content (empty when it is gone), so
   the watcher converges on what ZooKeeper holds without reading notifications.
   ``start`` returns once both have been read once.

Exceptions: ZooKeeper failures are ``ZkError`` (``ZkSession.call``); a znode that is not
Kafka's JSON raises ``ZNodeDecodeError`` from the store (the watch logs it and reports an
empty config).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Final, TypeVar

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from tidelog.zk.session import Watch, ZkSession
from tidelog.zk.znodes import CONFIG_CHANGE_PREFIX, ZNodeDecodeError

log = logging.getLogger(__name__)

CONFIG_BROKERS_PATH: Final = "/config/brokers"
#: The entity of the cluster-wide default (Kafka's ``ZooKeeperInternals.DEFAULT_STRING``).
DEFAULT_ENTITY: Final = "<default>"

R = TypeVar("R")


def broker_config_path(entity: str) -> str:
    """``entity``: a broker id as text, or ``DEFAULT_ENTITY``."""
    return f"{CONFIG_BROKERS_PATH}/{entity}"


def encode_broker_config(config: Mapping[str, str]) -> bytes:
    """``{"version":1,"config":{...}}``, compact, keys sorted."""
    body = {"version": 1, "config": dict(sorted(config.items()))}
    return json.dumps(body, separators=(",", ":")).encode()


def decode_broker_config(entity: str, data: bytes | None) -> dict[str, str]:
    """A broker config znode's ``config`` (empty for a znode without data)."""
    if not data:
        return {}
    what = broker_config_path(entity)
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZNodeDecodeError(what, data, f"not JSON: {exc}") from None
    config = obj.get("config", {}) if isinstance(obj, dict) else None
    if not isinstance(config, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in config.items()
    ):
        raise ZNodeDecodeError(what, data, "expected {'version':1,'config':{name: string}}")
    return dict(config)


def encode_broker_config_change(entity: str) -> bytes:
    """A ``/config/changes`` notification for a broker entity (Kafka's version 2 form)."""
    body = {"version": 2, "entity_path": f"brokers/{entity}"}
    return json.dumps(body, separators=(",", ":")).encode()


class ZkBrokerConfigStore:
    """Reads and writes ``/config/brokers`` (rules 1, 2); blocking kazoo calls run in a
    worker thread."""

    def __init__(self, zk: ZkSession) -> None:
        self._zk = zk
        #: Compare-and-set attempts that lost a race (for tests and logs).
        self.conflicts = 0

    async def get(self, entity: str) -> dict[str, str]:
        config, _version = await self._zk.call(self._read, entity)
        return config

    async def alter(
        self,
        entity: str,
        change: Callable[[dict[str, str]], tuple[dict[str, str] | None, R]],
        *,
        write: bool = True,
    ) -> R:
        """Rule 2: ``change(current)`` returns ``(new config or None: write nothing,
        answer)``; the answer of the call whose result was written (or not) is returned.
        ``change`` runs in a worker thread and must be pure. ``write=False`` only asks."""
        return await self._zk.call(self._alter_blocking, entity, change, write)

    def _read(self, entity: str) -> tuple[dict[str, str], int | None]:
        kz = self._zk.kazoo
        try:
            data, stat = kz.retry(kz.get, broker_config_path(entity))
        except NoNodeError:
            return {}, None
        return decode_broker_config(entity, data), int(stat.version)

    def _alter_blocking(
        self,
        entity: str,
        change: Callable[[dict[str, str]], tuple[dict[str, str] | None, R]],
        write: bool,
    ) -> R:
        kz = self._zk.kazoo
        path = broker_config_path(entity)
        while True:
            current, version = self._read(entity)
            new, answer = change(dict(current))
            if new is None or not write or new == current:
                return answer
            try:
                if version is None:
                    kz.retry(kz.create, path, encode_broker_config(new), makepath=True)
                elif not new:
                    kz.retry(kz.delete, path, version=version)
                else:
                    kz.retry(kz.set, path, encode_broker_config(new), version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                self.conflicts += 1
                continue
            kz.retry(
                kz.create, CONFIG_CHANGE_PREFIX, encode_broker_config_change(entity), sequence=True
            )
            return answer


class BrokerConfigWatch:
    """Rule 3: ``on_change(entity, config)`` on the loop whenever this broker's or the
    default znode changes (and once for each at start)."""

    def __init__(self, on_change: Callable[[str, dict[str, str]], None]) -> None:
        self._on_change = on_change
        self._watches: list[Watch] = []

    async def start(self, zk: ZkSession, broker_id: int) -> None:
        await zk.call(zk.kazoo.retry, zk.kazoo.ensure_path, CONFIG_BROKERS_PATH)
        for entity in (DEFAULT_ENTITY, str(broker_id)):
            first = asyncio.get_running_loop().create_future()
            self._watches.append(
                await zk.watch_data(broker_config_path(entity), self._callback(entity, first))
            )
            await first

    def _callback(
        self, entity: str, first: asyncio.Future[None]
    ) -> Callable[[bytes | None, int], None]:
        def on_data(data: bytes | None, _version: int) -> None:
            try:
                config = decode_broker_config(entity, data)
            except ZNodeDecodeError:
                log.exception("ignoring the dynamic config of broker entity %s", entity)
                config = {}
            try:
                self._on_change(entity, config)
            finally:
                if not first.done():
                    first.set_result(None)

        return on_data

    def stop(self) -> None:
        for watch in self._watches:
            watch.cancel()
        self._watches.clear()


__all__ = [
    "CONFIG_BROKERS_PATH",
    "DEFAULT_ENTITY",
    "BrokerConfigWatch",
    "ZkBrokerConfigStore",
    "broker_config_path",
    "decode_broker_config",
    "encode_broker_config",
    "encode_broker_config_change",
]
