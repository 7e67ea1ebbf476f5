"""Client quota configs in ZooKeeper, as Kafka keeps them in ZooKeeper mode (KIP-55, KIP-546).

Layout (Kafka's ``AdminZkClient.changeClientIdConfig`` / ``changeUserOrUserClientIdConfig``)::

    /config/users/<user>                       {"version":1,"config":{"producer_byte_rate":"1024"}}
    /config/users/<user>/clients/<client-id>   the same, for the pair
    /config/clients/<client-id>                the same, for a client-id
    /config/changes/config_change_<seq>        {"version":2,"entity_path":"users/<user>"}

Rules and invariants:

1. Names are sanitized (``tidelog.zk.users.sanitize``) or ``<default>``; this module takes
   and returns them as they are in the paths. An entity is ``(user, client)``, either None
   when the entity has no such component.
2. A user's znode may hold SCRAM credentials besides quotas (``tidelog.zk.users``): a write
   changes only what ``change`` changes. A config that becomes empty is written as
   ``{"version":1,"config":{}}`` (Kafka's ``changeEntityConfig`` never deletes: a user
   znode may have ``clients`` children).
3. Every write is a read-modify-write with a compare-and-set on the znode's version; a lost
   race reads again. After the write a ``/config/changes`` notification is posted, with
   the entity path Kafka writes, so every broker (tidelog's and Kafka's) reloads it.
4. ``read_all`` reads every entity's config (the tree is small: one znode per entity).

Exceptions: ZooKeeper failures are ``ZkError`` (``ZkSession.call``); a znode that is not
Kafka's JSON is logged and read as empty.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, Final

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from tidelog.zk.session import ZkSession
from tidelog.zk.users import CONFIG_USERS_PATH, encode_user_config
from tidelog.zk.znodes import CONFIG_CHANGE_PREFIX

log = logging.getLogger(__name__)

CONFIG_CLIENTS_PATH: Final = "/config/clients"

#: (sanitized user or <default> or None, sanitized client-id or <default> or None).
EntityKey = tuple[str | None, str | None]


def entity_path(entity: EntityKey) -> str:
    """The notification's ``entity_path`` (rule 3): the znode path below ``/config/``."""
    user, client = entity
    if user is not None and client is not None:
        return f"users/{user}/clients/{client}"
    if user is not None:
        return f"users/{user}"
    if client is not None:
        return f"clients/{client}"
    raise ValueError("an empty quota entity")


def entity_znode(entity: EntityKey) -> str:
    return f"/config/{entity_path(entity)}"


def encode_config_change(entity: EntityKey) -> bytes:
    body = {"version": 2, "entity_path": entity_path(entity)}
    return json.dumps(body, separators=(",", ":")).encode()


def decode_config(path: str, data: bytes | None) -> dict[str, str]:
    """A config znode's ``config`` (empty for no data or, logged, for bad JSON)."""
    if not data:
        return {}
    try:
        obj = json.loads(data)
        config = obj.get("config", {})
        if isinstance(config, dict):
            return {str(k): str(v) for k, v in config.items()}
    except (ValueError, UnicodeDecodeError, AttributeError):
        pass
    log.warning("ignoring %s: not Kafka's config JSON: %r", path, data[:200])
    return {}


class ZkClientQuotaStore:
    """Reads and writes the quota znodes (rules 1-4); blocking kazoo calls run in a worker
    thread."""

    def __init__(self, zk: ZkSession) -> None:
        self._zk = zk
        #: Compare-and-set attempts that lost a race (for tests and logs).
        self.conflicts = 0

    async def read_all(self) -> dict[EntityKey, dict[str, str]]:
        """Rule 4: every entity's config, including empty ones."""
        return await self._zk.call(self._read_all_blocking)

    async def alter(
        self, entity: EntityKey, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> None:
        """Rules 2, 3: write ``change(current config)`` (pure, run in a worker thread)."""
        await self._zk.call(self._alter_blocking, entity, change)

    def _children(self, path: str) -> list[str]:
        kz = self._zk.kazoo
        try:
            return sorted(kz.retry(kz.get_children, path))
        except NoNodeError:
            return []

    def _read(self, path: str) -> tuple[dict[str, str], int | None]:
        kz = self._zk.kazoo
        try:
            data, stat = kz.retry(kz.get, path)
        except NoNodeError:
            return {}, None
        return decode_config(path, data), int(stat.version)

    def _read_all_blocking(self) -> dict[EntityKey, dict[str, str]]:
        out: dict[EntityKey, dict[str, str]] = {}
        for user in self._children(CONFIG_USERS_PATH):
            out[(user, None)] = self._read(f"{CONFIG_USERS_PATH}/{user}")[0]
            for client in self._children(f"{CONFIG_USERS_PATH}/{user}/clients"):
                out[(user, client)] = self._read(entity_znode((user, client)))[0]
        for client in self._children(CONFIG_CLIENTS_PATH):
            out[(None, client)] = self._read(f"{CONFIG_CLIENTS_PATH}/{client}")[0]
        return out

    def _alter_blocking(
        self, entity: EntityKey, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> None:
        kz: Any = self._zk.kazoo
        path = entity_znode(entity)
        while True:
            current, version = self._read(path)
            new = change(dict(current))
            if new == current and version is not None:
                return
            try:
                if version is None:
                    kz.retry(kz.create, path, encode_user_config(new), makepath=True)
                else:
                    kz.retry(kz.set, path, encode_user_config(new), version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                self.conflicts += 1
                continue
            kz.retry(kz.create, CONFIG_CHANGE_PREFIX, encode_config_change(entity), sequence=True)
            return


__all__ = [
    "CONFIG_CLIENTS_PATH",
    "EntityKey",
    "ZkClientQuotaStore",
    "decode_config",
    "encode_config_change",
    "entity_path",
    "entity_znode",
]
