"""Where a broker's client quota configs live, and how changes reach its quota managers.

1. In a cluster the configs are ZooKeeper's (``tidelog.zk.client_quotas``): read at start,
   read again whenever ``/config/changes`` gets a child (Kafka's config change
   notifications: an alteration made through any broker, or by Kafka's tools, reaches every
   broker within milliseconds) and right after this broker's own alterations.
2. A lone broker (no ``zookeeper.connect``) keeps them in memory: they last until it stops.
3. ``ClientQuotas.update`` gets the quota keys of every entity (``entity.quota_values``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from tidelog.server.quotas.entity import QuotaEntity, quota_values
from tidelog.server.quotas.manager import ClientQuotas
from tidelog.zk import Watch, ZkError
from tidelog.zk.client_quotas import ZkClientQuotaStore
from tidelog.zk.session import ZkSession
from tidelog.zk.znodes import CONFIG_CHANGES_PATH

log = logging.getLogger(__name__)

Change = Callable[[dict[str, str]], dict[str, str]]


class QuotaConfigs:
    """The entities' configs (rules 1, 2) feeding ``quotas`` (rule 3)."""

    def __init__(self, quotas: ClientQuotas) -> None:
        self.quotas = quotas
        self._store: ZkClientQuotaStore | None = None
        self._memory: dict[QuotaEntity, dict[str, str]] = {}
        self._watch: Watch | None = None
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, zk: ZkSession | None) -> None:
        if zk is None:
            return
        self._store = ZkClientQuotaStore(zk)
        await self.reload()
        await zk.call(zk.kazoo.retry, zk.kazoo.ensure_path, CONFIG_CHANGES_PATH)
        self._watch = await zk.watch_children(
            CONFIG_CHANGES_PATH, lambda _children: self._changed.set()
        )
        self._task = asyncio.get_running_loop().create_task(self._changes_loop())

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        if self._task is not None:
            self._task.cancel()

    async def _changes_loop(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            try:
                await self.reload()
            except ZkError:
                pass  # logged by ``reload``; the next notification reads again
            except Exception:
                log.exception("applying the client quotas failed")

    async def read(self) -> dict[QuotaEntity, dict[str, str]]:
        """Every entity's whole config (ZooKeeper's, read now, in a cluster)."""
        if self._store is None:
            return {entity: dict(config) for entity, config in self._memory.items()}
        raw = await self._store.read_all()
        return {QuotaEntity(user, client): config for (user, client), config in raw.items()}

    async def reload(self) -> None:
        """Rule 3: apply what the configs say now. Raises ZkError."""
        try:
            configs = await self.read()
        except ZkError:
            log.exception("reading the client quotas failed")
            raise
        table = {entity: quota_values(config) for entity, config in configs.items()}
        before = self.quotas.entities
        self.quotas.update(table)
        if self.quotas.entities != before:
            log.info(
                "client quotas now: %s",
                "; ".join(
                    f"{entity.describe()}: {values}"
                    for entity, values in sorted(
                        self.quotas.entities.items(), key=lambda item: item[0].describe()
                    )
                )
                or "none",
            )

    async def alter(self, entity: QuotaEntity, change: Change) -> None:
        """Write ``change(current config)`` for ``entity`` and apply it here at once.
        Raises ZkError when the write fails."""
        if self._store is None:
            new = change(dict(self._memory.get(entity, {})))
            if new:
                self._memory[entity] = new
            else:
                self._memory.pop(entity, None)
        else:
            await self._store.alter((entity.user, entity.client_id), change)
        # Written: a failed re-read here is caught up by the change notification's.
        with contextlib.suppress(ZkError):
            await self.reload()


__all__ = ["QuotaConfigs"]
