"""SCRAM credentials in ZooKeeper, as Kafka keeps them (KIP-84, KIP-554 in ZooKeeper mode),
and the broker's in-memory cache of them.

Layout (Kafka's ``AdminZkClient.changeUserOrUserClientIdConfig``)::

    /config/users/<sanitized user>       {"version":1,"config":{"SCRAM-SHA-256":
                                           "salt=..,stored_key=..,server_key=..,iterations=4096"}}
    /config/changes/config_change_<seq>  {"version":2,"entity_path":"users/<sanitized user>"}

Rules and invariants:

1. A user's znode name is Kafka's ``Sanitizer.sanitize``: Java's ``URLEncoder`` (UTF-8;
   letters, digits and ``._-`` kept, ``*`` as ``%2A``, space as ``%20``, everything else
   ``%XX``); read back with ``Sanitizer.desanitize``.
2. A user's ``config`` may hold other entity configs besides SCRAM credentials (Kafka's user
   quotas, ``producer_byte_rate`` ...): they are kept as they are. A user "has" a
   credential per ``SCRAM-SHA-*`` key; a value that does not parse is logged and skipped.
3. Every write is a read-modify-write with a compare-and-set on the znode's version
   (create when absent, delete when the config becomes empty); a lost race reads again.
   After the write, a ``/config/changes`` notification is posted (persistent sequential)
   so Kafka brokers sharing the ZooKeeper see it. Notifications are never consumed or
   deleted here: the broker's topic-config watcher (``tidelog.server.cluster.node``) and Kafka's
   own purger own them.
4. ``UserCredentialCache`` holds every user's credentials in memory, so authentication
   never waits for ZooKeeper: a children watch on ``/config/users`` plus one data watch per
   user, all delivered on the event loop (``ZkSession.watch_children`` / ``watch_data``).
   Each data watch event carries the znode's whole current content, so the cache converges
   on what ZooKeeper holds; a user's entry is dropped when its znode goes.
5. ``start`` returns once every user that existed when it ran has been loaded.

Exceptions: ZooKeeper failures are ``ZkError`` (from ``ZkSession.call``); a user znode that is
not Kafka's JSON raises ``ZNodeDecodeError`` from the store (the cache logs and skips it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import urllib.parse
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from tidelog.security.errors import SecurityConfigError
from tidelog.security.scram import ScramCredential, ScramMechanism
from tidelog.zk.session import Watch, ZkSession
from tidelog.zk.znodes import CONFIG_CHANGE_PREFIX, ZNodeDecodeError

log = logging.getLogger(__name__)

CONFIG_USERS_PATH: Final = "/config/users"

Credentials = dict[ScramMechanism, ScramCredential]


# -- encodings (pure) -----------------------------------------------------------------------------


def sanitize(user: str) -> str:
    """Rule 1: Kafka's ``Sanitizer.sanitize``."""
    # quote() keeps [A-Za-z0-9_.-~]; URLEncoder keeps '*' (which Kafka then encodes) but
    # not '~'. Both encode space as %20 here, as Kafka's final form has it.
    return urllib.parse.quote(user, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    """Kafka's ``Sanitizer.desanitize`` (``URLDecoder``: ``+`` is a space too)."""
    return urllib.parse.unquote_plus(name)


def user_config_path(user: str) -> str:
    return f"{CONFIG_USERS_PATH}/{sanitize(user)}"


def encode_user_config(config: Mapping[str, str]) -> bytes:
    """``{"version":1,"config":{...}}`` in Jackson's compact form (keys sorted)."""
    body = {"version": 1, "config": dict(sorted(config.items()))}
    return json.dumps(body, separators=(",", ":")).encode()


def decode_user_config(user: str, data: bytes | None) -> dict[str, str]:
    """A user znode's ``config`` (empty for a znode without data)."""
    if not data:
        return {}
    what = user_config_path(user)
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZNodeDecodeError(what, data, f"not JSON: {exc}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("config", {}), dict):
        raise ZNodeDecodeError(what, data, "expected {'version':1,'config':{...}}")
    config: dict[str, Any] = obj.get("config", {})
    if not all(isinstance(v, str) for v in config.values()):
        raise ZNodeDecodeError(what, data, "config values are not strings")
    return {str(k): str(v) for k, v in config.items()}


def encode_user_config_change(user: str) -> bytes:
    """A ``/config/changes`` notification for a user (Kafka's version 2 form)."""
    body = {"version": 2, "entity_path": f"users/{sanitize(user)}"}
    return json.dumps(body, separators=(",", ":")).encode()


def scram_credentials(user: str, config: Mapping[str, str]) -> Credentials:
    """The SCRAM credentials in a user's config (rule 2: bad ones are logged, skipped)."""
    out: Credentials = {}
    for mechanism in ScramMechanism:
        text = config.get(mechanism.value)
        if text is None:
            continue
        try:
            out[mechanism] = ScramCredential.parse(text, key=mechanism.value)
        except SecurityConfigError as exc:
            log.warning("ignoring the %s credential of user %r: %s", mechanism.value, user, exc)
    return out


# -- the store ------------------------------------------------------------------------------------


class ZkUserCredentialStore:
    """Reads and writes ``/config/users`` (rules 1-3); every method runs its blocking kazoo
    calls in a worker thread."""

    def __init__(self, zk: ZkSession) -> None:
        self._zk = zk
        #: Compare-and-set attempts that lost a race (for tests and logs).
        self.conflicts = 0

    async def get(self, user: str) -> Credentials:
        """The user's credentials (empty when it has none)."""
        config, _version = await self._zk.call(self._read, user)
        return scram_credentials(user, config)

    async def list_users(self) -> dict[str, Credentials]:
        """Every user with at least one credential."""

        def run() -> dict[str, dict[str, str]]:
            kz = self._zk.kazoo
            try:
                names = kz.retry(kz.get_children, CONFIG_USERS_PATH)
            except NoNodeError:
                return {}
            out = {}
            for name in sorted(names):
                user = desanitize(name)
                try:
                    out[user] = self._read(user)[0]
                except ZNodeDecodeError:
                    log.exception("skipping user %r", user)
            return out

        configs = await self._zk.call(run)
        users = {user: scram_credentials(user, config) for user, config in configs.items()}
        return {user: creds for user, creds in users.items() if creds}

    async def upsert(
        self, user: str, mechanism: ScramMechanism, credential: ScramCredential
    ) -> None:
        await self.alter(user, {mechanism: credential}, ())

    async def delete(self, user: str, mechanism: ScramMechanism) -> bool:
        """Remove one credential; False (nothing written) when the user has none for it."""
        return await self.alter(user, {}, (mechanism,))

    async def alter(
        self,
        user: str,
        upsertions: Mapping[ScramMechanism, ScramCredential],
        deletions: Collection[ScramMechanism],
    ) -> bool:
        """Apply deletions then upsertions to one user atomically (rule 3). False, with
        nothing written, when a deletion names a credential the user does not have."""
        return await self._zk.call(self._alter_blocking, user, dict(upsertions), set(deletions))

    # -- blocking helpers (worker thread) ------------------------------------------------------

    def _read(self, user: str) -> tuple[dict[str, str], int | None]:
        kz = self._zk.kazoo
        try:
            data, stat = kz.retry(kz.get, user_config_path(user))
        except NoNodeError:
            return {}, None
        return decode_user_config(user, data), int(stat.version)

    def _alter_blocking(
        self,
        user: str,
        upsertions: Mapping[ScramMechanism, ScramCredential],
        deletions: Collection[ScramMechanism],
    ) -> bool:
        kz = self._zk.kazoo
        path = user_config_path(user)
        while True:
            config, version = self._read(user)
            if any(m.value not in config for m in deletions):
                return False
            new = {k: v for k, v in config.items() if k not in {m.value for m in deletions}}
            new.update((m.value, c.format()) for m, c in upsertions.items())
            try:
                if version is None:
                    if not new:
                        return True
                    kz.retry(kz.create, path, encode_user_config(new), makepath=True)
                elif not new:
                    kz.retry(kz.delete, path, version=version)
                else:
                    kz.retry(kz.set, path, encode_user_config(new), version=version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                # Someone else wrote between our read and our write: read again. (A write
                # retried after a connection loss may find its own first attempt: the
                # re-read then sees our result, and re-applying it is harmless.)
                self.conflicts += 1
                continue
            kz.retry(
                kz.create, CONFIG_CHANGE_PREFIX, encode_user_config_change(user), sequence=True
            )
            return True


# -- the cache ------------------------------------------------------------------------------------


class UserCredentialCache:
    """Every user's SCRAM credentials, in memory, kept current by watches (rule 4).

    ``lookup`` is synchronous and never touches ZooKeeper: it is the SASL authenticator's
    ``scram_lookup``. Use from the event loop that runs the ``ZkSession``.
    """

    def __init__(self) -> None:
        self._credentials: dict[str, Credentials] = {}
        #: Per watched user: the token its data-watch callbacks carry (stale ones are
        #: ignored) and, once the watch is set, its handle.
        self._tokens: dict[str, object] = {}
        self._watches: dict[str, Watch] = {}
        self._children_watch: Watch | None = None
        self._zk: ZkSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: Called (on the loop) after any user's credentials changed, with the user.
        self.on_change: Callable[[str], None] | None = None

    def lookup(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        creds = self._credentials.get(user)
        return None if creds is None else creds.get(mechanism)

    def users(self) -> dict[str, Credentials]:
        """A copy of what the cache holds (users with at least one credential)."""
        return {user: dict(creds) for user, creds in self._credentials.items() if creds}

    async def start(self, zk: ZkSession) -> None:
        """Load every user and keep watching (rule 5)."""
        self._zk = zk
        await zk.call(zk.kazoo.retry, zk.kazoo.ensure_path, CONFIG_USERS_PATH)
        self._children_watch = await zk.watch_children(CONFIG_USERS_PATH, self._on_children)
        names = await zk.call(zk.kazoo.retry, zk.kazoo.get_children, CONFIG_USERS_PATH)
        for name in names:
            await self._watch_user(desanitize(name))
        # Users the children watch's first call found are loaded by its tasks: wait for
        # them too (``_watch_user`` returns at once for a user a task is already setting up).
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def stop(self) -> None:
        if self._children_watch is not None:
            self._children_watch.cancel()
        for watch in self._watches.values():
            watch.cancel()
        self._watches.clear()
        self._tokens.clear()
        # A copy: each task's done callback discards it from ``self._tasks``.
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _on_children(self, names: list[str]) -> None:
        users = {desanitize(name) for name in names}
        for user in sorted(users - set(self._tokens)):
            task = asyncio.get_running_loop().create_task(self._watch_user(user))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        for user in set(self._tokens) - users:
            self._tokens.pop(user, None)
            watch = self._watches.pop(user, None)
            if watch is not None:
                watch.cancel()
            self._set(user, {})

    async def _watch_user(self, user: str) -> None:
        zk = self._zk
        if zk is None or user in self._tokens:
            return
        token = object()
        self._tokens[user] = token

        def on_data(data: bytes | None, _version: int) -> None:
            if self._tokens.get(user) is not token:
                return  # a watch the children watch already dropped
            try:
                config = decode_user_config(user, data)
            except ZNodeDecodeError:
                log.exception("ignoring the config of user %r", user)
                config = {}
            self._set(user, scram_credentials(user, config))

        try:
            watch = await zk.watch_data(user_config_path(user), on_data)
        except Exception:
            log.exception("cannot watch the credentials of user %r", user)
            if self._tokens.get(user) is token:
                del self._tokens[user]
            return
        if self._tokens.get(user) is token:
            self._watches[user] = watch
        else:
            watch.cancel()

    def _set(self, user: str, creds: Credentials) -> None:
        before = self._credentials.get(user, {})
        if creds:
            self._credentials[user] = creds
        else:
            self._credentials.pop(user, None)
        if creds != before:
            log.info(
                "SCRAM credentials of user %r: %s",
                user,
                ", ".join(m.value for m in creds) or "none",
            )
            if self.on_change is not None:
                self.on_change(user)


__all__ = [
    "CONFIG_USERS_PATH",
    "Credentials",
    "UserCredentialCache",
    "ZkUserCredentialStore",
    "decode_user_config",
    "desanitize",
    "encode_user_config",
    "encode_user_config_change",
    "sanitize",
    "scram_credentials",
    "user_config_path",
]
