"""ACLs in ZooKeeper, in Kafka's ZooKeeper-era layout (``kafka.zk.ZkAclStore``,
``ZkAclChangeStore``, ``ResourceZNode``), so Kafka's tools and brokers read what tidelog
writes and the other way round::

    /kafka-acl/<ResourceType>/<name>                    LITERAL patterns
    /kafka-acl-extended/prefixed/<ResourceType>/<name>  PREFIXED patterns
        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                              "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>                TOPIC:orders       (LITERAL)
    /kafka-acl-extended-changes/acl_changes_<seq>       {"version":1,"resourceType":"TOPIC",
                                                         "name":"ord","patternType":"PREFIXED"}

``<ResourceType>`` in paths is Kafka's ``SecurityUtils`` spelling (``Topic``,
``TransactionalId``); change notifications carry Java's enum names (``TOPIC``), as Kafka 2.4+
writes them. Every spelling Kafka ever wrote is read back.

Rules:

1. A resource's ACLs are only written with compare-and-set on its znode version (create
   when absent, delete when its last ACL goes), retried from a fresh read up to
   ``MAX_UPDATE_RETRIES`` times (Kafka's ``maxUpdateRetries``); the write and its change
   notification are one multi-op, so no broker misses a change that happened. One store's
   writes queue behind each other (Kafka's authorizer lock): races are between brokers only.
2. An update that changes nothing writes nothing and notifies nobody.
3. ``watch`` reports, on the event loop, the patterns named by change notifications newer
   than those present when it started (the caller loads everything after starting the watch,
   so nothing falls in between). Notifications older than ``CHANGE_EXPIRATION_MS`` (Kafka's
   15 minutes) are purged by the watchers, as Kafka's ``ZkNodeChangeNotificationListener``.
4. Unreadable ACL data raises ``AclZNodeDecodeError``: the broker fails closed rather than
   silently dropping a DENY.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from tidelog.security.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tidelog.zk.errors import ZkError
from tidelog.zk.session import Watch, ZkSession

log = logging.getLogger(__name__)

LITERAL_ACL_PATH: Final = "/kafka-acl"
EXTENDED_ACL_PATH: Final = "/kafka-acl-extended"
PREFIXED_ACL_PATH: Final = EXTENDED_ACL_PATH + "/prefixed"
LITERAL_CHANGES_PATH: Final = "/kafka-acl-changes"
EXTENDED_CHANGES_PATH: Final = "/kafka-acl-extended-changes"
CHANGE_PREFIX: Final = "acl_changes_"
#: Kafka's ``ZkAclStore.securePaths``: created when a store is first used.
ACL_PATHS: Final = (
    LITERAL_ACL_PATH,
    PREFIXED_ACL_PATH,
    LITERAL_CHANGES_PATH,
    EXTENDED_CHANGES_PATH,
)
MAX_UPDATE_RETRIES: Final = 10
CHANGE_EXPIRATION_MS: Final = 15 * 60 * 1000
#: How often a watcher looks for expired notifications (each look stats every child).
PURGE_INTERVAL_S: Final = 60.0
ACLS_VERSION: Final = 1
#: The types an ACL can be stored on (the directories a full load lists).
STORABLE_TYPES: Final = tuple(
    t for t in ResourceType if t not in (ResourceType.UNKNOWN, ResourceType.ANY)
)

AclTable = dict[ResourcePattern, frozenset[AccessControlEntry]]


class AclZNodeDecodeError(ZkError):
    """An ACL znode or change notification holds something Kafka never writes."""


# -- encodings (pure) ------------------------------------------------------------------------


def acl_root(pattern_type: PatternType) -> str:
    if pattern_type == PatternType.LITERAL:
        return LITERAL_ACL_PATH
    if pattern_type == PatternType.PREFIXED:
        return PREFIXED_ACL_PATH
    raise ValueError(f"no ACL znodes for pattern type {pattern_type.name}")


def resource_type_path(pattern_type: PatternType, resource_type: ResourceType) -> str:
    return f"{acl_root(pattern_type)}/{resource_type.kafka_name}"


def resource_path(pattern: ResourcePattern) -> str:
    return f"{resource_type_path(pattern.pattern_type, pattern.resource_type)}/{pattern.name}"


def change_path(pattern_type: PatternType) -> str:
    """The directory of ``pattern_type``'s change notifications."""
    return LITERAL_CHANGES_PATH if pattern_type == PatternType.LITERAL else EXTENDED_CHANGES_PATH


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """Kafka's ``ResourceZNode.encode``, entries sorted so equal sets write equal bytes."""
    acls = [
        {
            "principal": e.principal,
            "permissionType": e.permission.kafka_name,
            "operation": e.operation.kafka_name,
            "host": e.host,
        }
        for e in sorted(entries)
    ]
    return json.dumps({"version": ACLS_VERSION, "acls": acls}, separators=(",", ":")).encode()


def decode_acls(data: bytes, path: str = "") -> frozenset[AccessControlEntry]:
    """Kafka's ``AclEntry.fromBytes``; empty data is no ACLs."""
    if not data:
        return frozenset()
    try:
        doc = json.loads(data)
        return frozenset(
            AccessControlEntry(
                principal=str(acl["principal"]),
                host=str(acl["host"]),
                operation=AclOperation.from_name(str(acl["operation"])),
                permission=AclPermissionType.from_name(str(acl["permissionType"])),
            )
            for acl in doc["acls"]
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise AclZNodeDecodeError(f"unreadable ACLs at {path}: {data!r}") from exc


def encode_change(pattern: ResourcePattern) -> bytes:
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    doc = {
        "version": 1,
        "resourceType": pattern.resource_type.name,
        "name": pattern.name,
        "patternType": pattern.pattern_type.name,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_change(directory: str, data: bytes) -> ResourcePattern:
    text = data.decode("utf-8", errors="replace")
    if directory == LITERAL_CHANGES_PATH:
        type_name, sep, name = text.partition(":")
        if not sep:
            raise AclZNodeDecodeError(
                f"expected a string in format ResourceType:ResourceName but got {text}"
            )
        return ResourcePattern(ResourceType.from_name(type_name), name, PatternType.LITERAL)
    try:
        doc = json.loads(text)
        return ResourcePattern(
            ResourceType.from_name(str(doc["resourceType"])),
            str(doc["name"]),
            PatternType.from_name(str(doc["patternType"])),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise AclZNodeDecodeError(f"Failed to parse ACL change event {text!r}") from exc


def change_sequence(child: str) -> int:
    """``acl_changes_0000000012`` -> 12 (-1 for anything else)."""
    digits = child.removeprefix(CHANGE_PREFIX)
    return int(digits) if child.startswith(CHANGE_PREFIX) and digits.isdigit() else -1


# -- the store ------------------------------------------------------------------------------


class AclChangeWatch:
    """The two notification watches of one ``ZkAclStore.watch``; ``cancel`` stops both."""

    def __init__(self, watches: Sequence[Watch]) -> None:
        self._watches = list(watches)

    def cancel(self) -> None:
        for watch in self._watches:
            watch.cancel()


class ZkAclStore:
    """Kafka's ACL znodes over one ``ZkSession``; see the module docstring."""

    def __init__(self, zk: ZkSession) -> None:
        self.zk = zk
        self._paths_ready = False
        # Kafka's authorizer lock: this store's writers queue, so compare-and-set races are
        # only ever between brokers.
        self._write_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    async def ensure_paths(self) -> None:
        if self._paths_ready:
            return
        kz = self.zk.kazoo
        for path in ACL_PATHS:
            await self.zk.call(kz.retry, kz.ensure_path, path)
        self._paths_ready = True

    # --- reads -----------------------------------------------------------------------------

    def _read(self, pattern: ResourcePattern) -> tuple[frozenset[AccessControlEntry], int]:
        """Blocking: the entries and znode version of ``pattern`` (version -1: absent)."""
        kz = self.zk.kazoo
        path = resource_path(pattern)
        try:
            data, stat = kz.retry(kz.get, path)
        except NoNodeError:
            return frozenset(), -1
        return decode_acls(data, path), int(stat.version)

    def _children(self, path: str) -> list[str]:
        kz = self.zk.kazoo
        try:
            return sorted(kz.retry(kz.get_children, path))
        except NoNodeError:
            return []

    def _patterns(self, types: Iterable[tuple[PatternType, ResourceType]]) -> list[ResourcePattern]:
        """Blocking: the stored patterns of the given (pattern type, resource type) pairs."""
        return [
            ResourcePattern(resource_type, name, pattern_type)
            for pattern_type, resource_type in types
            for name in self._children(resource_type_path(pattern_type, resource_type))
        ]

    def _load_all(self) -> AclTable:
        table: AclTable = {}
        pairs = [
            (pattern_type, resource_type)
            for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED)
            for resource_type in STORABLE_TYPES
        ]
        for pattern in self._patterns(pairs):
            entries, _version = self._read(pattern)
            if entries:
                table[pattern] = entries
        return table

    async def load_all(self) -> AclTable:
        """Every stored pattern with its ACLs."""
        await self.ensure_paths()
        return await self.zk.call(self._load_all)

    async def load(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        entries, _version = await self.zk.call(self._read, pattern)
        return entries

    # --- writes ----------------------------------------------------------------------------

    def _update(
        self,
        pattern: ResourcePattern,
        change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]],
    ) -> tuple[frozenset[AccessControlEntry], frozenset[AccessControlEntry]]:
        """Blocking, rule 1: apply ``change`` to ``pattern``'s ACLs; (first read, result)."""
        kz = self.zk.kazoo
        path = resource_path(pattern)
        kz.retry(kz.ensure_path, resource_type_path(pattern.pattern_type, pattern.resource_type))
        first: frozenset[AccessControlEntry] | None = None
        for _attempt in range(MAX_UPDATE_RETRIES + 1):
            current, version = self._read(pattern)
            if first is None:
                first = current
            wanted = change(current)
            if wanted == current:
                return first, current  # rule 2 (or a retried write of ours that landed)

            def attempt(
                wanted: frozenset[AccessControlEntry] = wanted, version: int = version
            ) -> list[Any]:
                tx = kz.transaction()
                if not wanted:
                    tx.delete(path, version)
                elif version < 0:
                    tx.create(path, encode_acls(wanted))
                else:
                    tx.set_data(path, encode_acls(wanted), version)
                notice = f"{change_path(pattern.pattern_type)}/{CHANGE_PREFIX}"
                tx.create(notice, encode_change(pattern), sequence=True)
                return list(tx.commit())

            results = kz.retry(attempt)
            failure = next((r for r in results if isinstance(r, Exception)), None)
            if failure is None:
                log.info("updated ACLs for %s: %d entries", pattern, len(wanted))
                return first, wanted
            if not isinstance(failure, BadVersionError | NoNodeError | NodeExistsError):
                raise failure
        raise ZkError(f"Failed to update ACLs for {pattern} after {MAX_UPDATE_RETRIES} retries")

    async def add(self, bindings: Iterable[AclBinding]) -> AclTable:
        """Store ``bindings``; the resulting ACLs of every pattern they touch."""
        await self.ensure_paths()
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in bindings:
            by_pattern.setdefault(binding.pattern, set()).add(binding.entry)
        result: AclTable = {}
        async with self._write_lock:
            for pattern, entries in by_pattern.items():
                added = frozenset(entries)
                _first, now = await self.zk.call(self._update, pattern, added.__or__)
                result[pattern] = now
        return result

    def _candidates(self, filters: Sequence[AclBindingFilter]) -> list[ResourcePattern]:
        pairs = sorted(
            {
                (pattern_type, resource_type)
                for f in filters
                for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED)
                if f.pattern_type in (PatternType.ANY, PatternType.MATCH, pattern_type)
                for resource_type in STORABLE_TYPES
                if f.resource_type in (ResourceType.ANY, resource_type)
            }
        )
        return [p for p in self._patterns(pairs) if any(f.matches_pattern(p) for f in filters)]

    async def remove(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        """Delete every stored binding any of ``filters`` matches; those deleted, sorted."""
        if not filters:
            return []
        await self.ensure_paths()
        async with self._write_lock:
            return await self.zk.call(self._remove, filters)

    def _remove(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        removed: list[AclBinding] = []
        for pattern in self._candidates(filters):

            def matched(entry: AccessControlEntry, pattern: ResourcePattern = pattern) -> bool:
                return any(f.matches(AclBinding(pattern, entry)) for f in filters)

            def drop(current: frozenset[AccessControlEntry]) -> frozenset[AccessControlEntry]:
                return frozenset(e for e in current if not matched(e))

            first, now = self._update(pattern, drop)
            removed.extend(AclBinding(pattern, e) for e in first - now if matched(e))
        return sorted(removed)

    # --- change notifications --------------------------------------------------------------

    async def watch(self, callback: Callable[[list[ResourcePattern]], None]) -> AclChangeWatch:
        """Rule 3: ``callback(patterns)`` on the loop for every new change notification."""
        await self.ensure_paths()
        watches = [
            await self.zk.watch_children(path, self._watcher(path, callback))
            for path in (LITERAL_CHANGES_PATH, EXTENDED_CHANGES_PATH)
        ]
        return AclChangeWatch(watches)

    def _watcher(
        self, directory: str, callback: Callable[[list[ResourcePattern]], None]
    ) -> Callable[[list[str]], None]:
        seen: int | None = None  # highest sequence handled; None before the first call
        lock = asyncio.Lock()
        last_purge = -PURGE_INTERVAL_S  # monotonic seconds

        def on_children(children: list[str]) -> None:
            nonlocal seen
            ordered = sorted((change_sequence(c), c) for c in children if change_sequence(c) >= 0)
            newest = ordered[-1][0] if ordered else -1
            fresh = [c for s, c in ordered if seen is not None and s > seen]
            seen = newest if seen is None else max(seen, newest)

            async def process() -> None:
                async with lock:
                    patterns = await self.zk.call(self._read_changes, directory, fresh)
                    if patterns:
                        callback(patterns)
                    nonlocal last_purge
                    if time.monotonic() - last_purge >= PURGE_INTERVAL_S:
                        last_purge = time.monotonic()
                        await self.zk.call(self._purge, directory, [c for _s, c in ordered])

            task = asyncio.get_running_loop().create_task(process())
            self._tasks.add(task)
            task.add_done_callback(self._task_done)

        return on_children

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("ACL change notification failed", exc_info=task.exception())

    def _read_changes(self, directory: str, children: list[str]) -> list[ResourcePattern]:
        kz = self.zk.kazoo
        patterns: list[ResourcePattern] = []
        for child in children:
            try:
                data, _stat = kz.retry(kz.get, f"{directory}/{child}")
            except NoNodeError:
                continue  # purged already
            try:
                patterns.append(decode_change(directory, data))
            except AclZNodeDecodeError:
                log.exception("ignoring ACL change notification %s/%s", directory, child)
        return patterns

    def _purge(self, directory: str, children: list[str]) -> None:
        """Rule 3: delete notifications older than ``CHANGE_EXPIRATION_MS``."""
        kz = self.zk.kazoo
        cutoff = time.time() * 1000 - CHANGE_EXPIRATION_MS
        for child in children:
            path = f"{directory}/{child}"
            with contextlib.suppress(NoNodeError):
                stat = kz.retry(kz.exists, path)
                if stat is not None and stat.ctime < cutoff:
                    kz.retry(kz.delete, path)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
