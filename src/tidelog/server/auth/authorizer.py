"""The broker's ACL authorizer: Kafka's ``kafka.security.authorizer.AclAuthorizer`` as a shell
around the pure ``AclAuthorizerCore`` (``tidelog.security.acls``) and an ``AclStore``
(ZooKeeper: ``tidelog.zk.acls.ZkAclStore``; a lone broker: ``InMemoryAclStore``).

Rules:

1. ``authorizer.class.name`` picks it: ``kafka.security.authorizer.AclAuthorizer``,
   ``kafka.security.auth.SimpleAclAuthorizer`` (its pre-2.4 name) or
   ``tidelog.security.AclAuthorizer``; empty means no authorizer (everything is allowed and
   the ACL APIs answer SECURITY_DISABLED); anything else stops start-up with a ConfigError
   naming the key. ``super.users`` is Kafka's ``User:admin;User:broker``;
   ``allow.everyone.if.no.acl.found`` is passed through to the core.
2. ``start``/``attach`` watches the store's change notifications first and loads every ACL
   second, so no change falls in between. A notification reloads just the patterns it names.
3. Reloads and local applications of this broker's own writes are serialized (one lock):
   every write also leaves a notification, so the last reload of a pattern always reads a
   state at least as new as the last write anyone made.
4. ``create_acls``/``delete_acls`` write to the store and then apply the result to the local
   table before returning: the caller's next request already sees the change. Other brokers
   see it through the notifications (rule 2).
5. ``authorize`` answers for the request being handled (``current_request()`` unless a
   context is given). A denial is logged once, at INFO on logger ``tidelog.authorizer``, in
   Kafka's words: ``Principal = User:bob is Denied Operation = Write from host = 10.0.0.7 on
   resource = Topic:LITERAL:secret for request = Produce with resourceRefCount = 1``; an
   allowed action at DEBUG.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from tidelog.errors import ConfigError, ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.security.acls import (
    MATCH_ALL,
    AccessControlEntry,
    AclAuthorizerCore,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    ResourcePattern,
    ResourceType,
    binding_error,
    filter_error,
)
from tidelog.security.principal import KafkaPrincipal
from tidelog.server.network.request_context import RequestContext, current_request
from tidelog.zk import ZkClient
from tidelog.zk.acls import ZkAclStore

log = logging.getLogger("tidelog.authorizer")

AUTHORIZER_CLASS_KEY: Final = "authorizer.class.name"
SUPER_USERS_KEY: Final = "super.users"
#: Rule 1: the class names that select this authorizer.
ACL_AUTHORIZER_CLASS_NAMES: Final = frozenset(
    {
        "kafka.security.authorizer.AclAuthorizer",
        "kafka.security.auth.SimpleAclAuthorizer",
        "tidelog.security.AclAuthorizer",
    }
)

AclTable = dict[ResourcePattern, frozenset[AccessControlEntry]]


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class AclStore(Protocol):
    """Where ACLs persist (``ZkAclStore``'s interface)."""

    async def load_all(self) -> AclTable: ...

    async def load(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]: ...

    async def add(self, bindings: Iterable[AclBinding]) -> AclTable: ...

    async def remove(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]: ...

    async def watch(self, callback: Callable[[list[ResourcePattern]], None]) -> Cancellable: ...


class _NoWatch:
    def cancel(self) -> None:
        pass


class InMemoryAclStore:
    """A lone broker's ACLs: kept in memory only (lost on restart), never any notification."""

    def __init__(
        self, acls: Mapping[ResourcePattern, frozenset[AccessControlEntry]] | None = None
    ) -> None:
        self.table = AclAuthorizerCore(acls)

    async def load_all(self) -> AclTable:
        return dict(self.table.acls)

    async def load(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self.table.get(pattern)

    async def add(self, bindings: Iterable[AclBinding]) -> AclTable:
        bindings = list(bindings)
        self.table.add(bindings)
        return {b.pattern: self.table.get(b.pattern) for b in bindings}

    async def remove(self, filters: Sequence[AclBindingFilter]) -> list[AclBinding]:
        removed = [b for b in self.table.bindings(MATCH_ALL) if any(f.matches(b) for f in filters)]
        self.table.remove(removed)
        return removed

    async def watch(self, callback: Callable[[list[ResourcePattern]], None]) -> Cancellable:
        return _NoWatch()


@dataclass(frozen=True, slots=True)
class AclCreateResult:
    """One CreateAcls creation's outcome (Kafka's ``AclCreateResult``)."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None


@dataclass(frozen=True, slots=True)
class AclDeleteResult:
    """One DeleteAcls filter's outcome: its error, or the bindings it deleted (each deleted
    binding is reported under the first filter matching it, as Kafka does)."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    deleted: tuple[AclBinding, ...] = field(default=())


def request_name(api_key: int | None) -> str:
    """Kafka's request name for the log: ``Produce``, ``CreateAcls`` (the number if unknown)."""
    if api_key is None:
        return "Unknown"
    try:
        return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: ``User:admin;User:broker`` (blanks ignored); ConfigError if a
    principal has no type."""
    users = set()
    for item in (part.strip() for part in text.split(";")):
        if not item:
            continue
        try:
            users.add(str(KafkaPrincipal.parse(item)))
        except ValueError as exc:
            raise ConfigError(SUPER_USERS_KEY, str(exc)) from exc
    return frozenset(users)


class AclAuthorizer:
    """See the module docstring."""

    def __init__(
        self,
        *,
        super_users: frozenset[str] = frozenset(),
        allow_everyone_if_no_acl_found: bool = False,
        store: AclStore | None = None,
    ) -> None:
        self.core = AclAuthorizerCore(
            super_users=super_users,
            allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found,
        )
        self.store: AclStore = store if store is not None else InMemoryAclStore()
        self._lock = asyncio.Lock()
        self._watch: Cancellable | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # --- life cycle ----------------------------------------------------------------------

    async def start(self, zk: ZkClient) -> None:
        """Rule 2 on ZooKeeper: Kafka's ACL znodes on ``zk``'s session."""
        await self.attach(ZkAclStore(zk))

    async def attach(self, store: AclStore) -> None:
        """Rule 2 on any store: watch, then load everything."""
        self.store = store
        self._watch = await store.watch(self._on_change)
        table = await store.load_all()
        async with self._lock:
            self.core.replace_all(table)
        log.info("loaded %d ACL resource patterns", len(table))

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        close = getattr(self.store, "close", None)
        if close is not None:
            await close()

    def _on_change(self, patterns: list[ResourcePattern]) -> None:
        task = asyncio.get_running_loop().create_task(self._reload(patterns))
        self._tasks.add(task)
        task.add_done_callback(self._reloaded)

    async def _reload(self, patterns: list[ResourcePattern]) -> None:
        async with self._lock:
            for pattern in dict.fromkeys(patterns):
                if not pattern.pattern_type.is_specific:
                    continue
                entries = await self.store.load(pattern)
                self.core.set_acls(pattern, entries)
                log.debug("reloaded ACLs of %s: %d entries", pattern, len(entries))

    def _reloaded(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "reloading ACLs after a change notification failed", exc_info=task.exception()
            )

    # --- decisions -----------------------------------------------------------------------

    def authorize(
        self,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        context: RequestContext | None = None,
        *,
        api_key: int | None = None,
        ref_count: int = 1,
        log_if_denied: bool = True,
    ) -> bool:
        """Rule 5 (the decision itself: ``AclAuthorizerCore.authorize``)."""
        ctx = context if context is not None else current_request()
        allowed = self.core.authorize(
            ctx.principal, ctx.client_host, operation, resource_type, name
        )
        level = logging.DEBUG if allowed or not log_if_denied else logging.INFO
        if log.isEnabledFor(level):
            log.log(
                level,
                "Principal = %s is %s Operation = %s from host = %s on resource = %s "
                "for request = %s with resourceRefCount = %d",
                ctx.principal,
                "Allowed" if allowed else "Denied",
                operation.kafka_name,
                ctx.client_host,
                ResourcePattern(resource_type, name),
                request_name(api_key),
                ref_count,
            )
        return allowed

    def acls(self, acl_filter: AclBindingFilter = MATCH_ALL) -> list[AclBinding]:
        """The bindings this broker knows that ``acl_filter`` matches (DescribeAcls)."""
        return self.core.bindings(acl_filter)

    # --- changes -------------------------------------------------------------------------

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
        """Rule 4: one result per binding, in order; invalid ones are INVALID_REQUEST, a
        failed write UNKNOWN_SERVER_ERROR for the bindings of that resource pattern."""
        results: list[AclCreateResult | None] = [None] * len(bindings)
        groups: dict[ResourcePattern, list[int]] = {}
        for i, binding in enumerate(bindings):
            error = binding_error(binding)
            if error is not None:
                results[i] = AclCreateResult(ErrorCode.INVALID_REQUEST, error)
            else:
                groups.setdefault(binding.pattern, []).append(i)
        for pattern, indexes in groups.items():
            try:
                table = await self.store.add([bindings[i] for i in indexes])
            except Exception as exc:
                log.exception("failed to create ACLs on %s", pattern)
                for i in indexes:
                    results[i] = AclCreateResult(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
                continue
            async with self._lock:
                for changed, entries in table.items():
                    self.core.set_acls(changed, entries)
            for i in indexes:
                log.info("created ACL %s on %s", bindings[i].entry, pattern)
                results[i] = AclCreateResult()
        return [r if r is not None else AclCreateResult() for r in results]

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        """Rule 4: one result per filter, in order (Kafka's ``deleteAcls``)."""
        errors = [filter_error(f) for f in filters]
        valid = [f for f, error in zip(filters, errors, strict=True) if error is None]
        try:
            removed = await self.store.remove(valid) if valid else []
        except Exception as exc:
            log.exception("failed to delete ACLs")
            return [
                AclDeleteResult(ErrorCode.INVALID_REQUEST, error)
                if error is not None
                else AclDeleteResult(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
                for error in errors
            ]
        async with self._lock:
            self.core.remove(removed)
        by_filter: dict[int, list[AclBinding]] = {}
        for binding in removed:
            log.info("deleted ACL %s on %s", binding.entry, binding.pattern)
            first = next(
                (i for i, f in enumerate(filters) if errors[i] is None and f.matches(binding)),
                None,
            )
            if first is not None:
                by_filter.setdefault(first, []).append(binding)
        return [
            AclDeleteResult(ErrorCode.INVALID_REQUEST, error)
            if error is not None
            else AclDeleteResult(deleted=tuple(by_filter.get(i, ())))
            for i, error in enumerate(errors)
        ]


def authorizer_from_config(
    class_name: str, super_users: str = "", allow_everyone: bool = False
) -> AclAuthorizer | None:
    """Rule 1: the authorizer ``authorizer.class.name`` names, None when it is empty."""
    name = class_name.strip()
    if not name:
        return None
    if name not in ACL_AUTHORIZER_CLASS_NAMES:
        raise ConfigError(
            AUTHORIZER_CLASS_KEY,
            f"unknown authorizer {name!r}; tidelog has "
            + ", ".join(sorted(ACL_AUTHORIZER_CLASS_NAMES)),
        )
    return AclAuthorizer(
        super_users=parse_super_users(super_users),
        allow_everyone_if_no_acl_found=allow_everyone,
    )
