"""Where SCRAM credentials live: the store interface the credential APIs and the broker's
security share, and the in-memory store of a broker without ZooKeeper (KIP-554; a cluster's
store is ZooKeeper's ``/config/users``, ``tidelog.zk.users.ZkUserCredentialStore``)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

from tidelog.security.scram import ScramCredential, ScramMechanism

Credentials = dict[ScramMechanism, ScramCredential]


class UserCredentialStore(Protocol):
    """Where credentials live (``tidelog.zk.users.ZkUserCredentialStore``, or
    ``MemoryUserCredentialStore``)."""

    async def get(self, user: str) -> Credentials: ...

    async def list_users(self) -> dict[str, Credentials]: ...

    async def alter(
        self,
        user: str,
        upsertions: Mapping[ScramMechanism, ScramCredential],
        deletions: Collection[ScramMechanism],
    ) -> bool: ...


class MemoryUserCredentialStore:
    """A store in memory (single-node brokers without ZooKeeper, tests); also a
    ``scram_lookup`` for the SASL authenticator."""

    def __init__(self, users: Mapping[str, Credentials] | None = None) -> None:
        self._users: dict[str, Credentials] = {u: dict(c) for u, c in (users or {}).items()}

    def lookup(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    async def get(self, user: str) -> Credentials:
        return dict(self._users.get(user, {}))

    async def list_users(self) -> dict[str, Credentials]:
        return {u: dict(c) for u, c in sorted(self._users.items()) if c}

    async def alter(
        self,
        user: str,
        upsertions: Mapping[ScramMechanism, ScramCredential],
        deletions: Collection[ScramMechanism],
    ) -> bool:
        current = self._users.get(user, {})
        if any(m not in current for m in deletions):
            return False
        new = {m: c for m, c in current.items() if m not in deletions}
        new.update(upsertions)
        if new:
            self._users[user] = new
        else:
            self._users.pop(user, None)
        return True


__all__ = ["Credentials", "MemoryUserCredentialStore", "UserCredentialStore"]
