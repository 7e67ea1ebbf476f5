"""One ZooKeeper session over kazoo, for asyncio callers: connection, session events,
watches, and the plumbing the znode stores of this package share.

kazoo runs its own threads (a connection thread and a callback thread); nothing of it leaks
out:

* every blocking ZooKeeper call runs in ``asyncio.to_thread``;
* every watch and session callback reaches the caller's event loop only through
  ``loop.call_soon_threadsafe`` — the callbacks you pass in always run on the loop, never on
  a kazoo thread, so they may touch loop state freely (and must not block it).

Session events: connection loss (``SUSPENDED``: the session may still be alive), the same
session back (``RECONNECTED``), session expiry (``EXPIRED``: ephemerals gone — our
registration and any controllership), and a new session after expiry (``REESTABLISHED``:
``_register_again`` has re-registered the broker; the new broker epoch is passed along).
kazoo's own recipes re-arm watches after reconnects and expiry.

ZooKeeper security (Kafka's ``zookeeper.set.acl``; rules in ``tidelog.zk.security``): with
``auth`` the session (and the chroot-creating boot session) authenticates with digest auth,
re-sent on every reconnect. With ``set_acl`` the session's kazoo client — the one ``kazoo``
hands to this package's other stores — creates every node with ``acls_for(path)``, and
start-up secures nodes an earlier unsecured run left open. ``set_acl`` without ``auth`` is a
ValueError naming ``zookeeper.set.acl``, as Kafka refuses to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Self, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    KazooException,
    NodeExistsError,
)
from kazoo.protocol.states import KazooState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from tidelog.zk import znodes
from tidelog.zk.errors import ZkError
from tidelog.zk.security import (
    KAFKA_ROOT_PATHS,
    AclKazooClient,
    SecureTreeReport,
    ZkAuth,
    secure_existing_tree_blocking,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Kafka's default ``zookeeper.session.timeout.ms``.
DEFAULT_SESSION_TIMEOUT_MS: Final = 18000


class SessionEvent(enum.Enum):
    """ZooKeeper session transitions, as seen by this session (see the module docstring)."""

    SUSPENDED = "suspended"
    RECONNECTED = "reconnected"
    EXPIRED = "expired"
    REESTABLISHED = "reestablished"


class Watch:
    """A watch handle; ``cancel()`` stops further callbacks (kazoo drops it on its next fire)."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


#: The readiness probe expects refusals while a server starts; it does not log them.
_QUIET: Final = logging.getLogger(__name__ + ".probe")
_QUIET.setLevel(logging.CRITICAL)
_QUIET.propagate = False


def split_connect_string(connect: str) -> tuple[str, str]:
    """``"h1:p1,h2:p2/chroot"`` -> (``"h1:p1,h2:p2"``, ``"/chroot"`` or ``""``)."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, (slash + chroot).rstrip("/") if slash else ""


def probe_session(connect: str, *, timeout_s: float) -> bool:
    """Blocking: True when a real ZooKeeper session can be opened at ``connect``.

    This is the readiness test for a starting server (``ruok`` answers too early).
    """
    hosts, _ = split_connect_string(connect)
    client = KazooClient(
        hosts=hosts,
        timeout=max(timeout_s, 1.0),
        connection_retry=KazooRetry(max_tries=0),
        command_retry=KazooRetry(max_tries=0),
        logger=_QUIET,
    )
    try:
        client.start(timeout=timeout_s)
        client.get("/")
    except Exception:  # any failure means "not ready yet"
        return False
    else:
        return True
    finally:
        with contextlib.suppress(Exception):
            client.stop()
            client.close()


# -- the session ---------------------------------------------------------------------------------


class ZkSession:
    """One ZooKeeper session for one broker (or tool), with an asyncio-facing API.

    ``connect`` is ``zookeeper.connect`` (``host:port[,host:port...][/chroot]``); a missing
    chroot path is created, as Kafka does. Create with ``await ZkClient.connect(...)`` from
    inside the event loop that will receive callbacks.
    """

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        loop: asyncio.AbstractEventLoop,
        auth: ZkAuth | None = None,
        set_acl: bool = False,
    ) -> None:
        self.connect_string = connect
        self.session_timeout_ms = session_timeout_ms
        self._loop = loop
        self._hosts, self._chroot = split_connect_string(connect)
        self.auth = auth
        self.set_acl = set_acl
        timeout_s = session_timeout_ms / 1000.0
        # Raises ValueError (naming zookeeper.set.acl) for set_acl without auth.
        self._kz = AclKazooClient(
            auth=auth,
            set_acl=set_acl,
            hosts=connect,
            timeout=timeout_s,
            # Reconnect forever (the session may still be alive); retry commands across
            # connection losses for up to one session timeout.
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            command_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0, deadline=timeout_s),
        )
        self._closing = False
        self._lost = False
        self._session_listeners: list[Callable[[SessionEvent, int | None], None]] = []
        self._ever_connected = False
        self._tasks: set[asyncio.Task[None]] = set()  # strong refs to background tasks
        self._kz.add_listener(self._on_kazoo_state)

    @classmethod
    async def connect(
        cls,
        connect: str,
        *,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connection_timeout_s: float | None = None,
        auth: ZkAuth | None = None,
        set_acl: bool = False,
    ) -> Self:
        """Open a session (creating the chroot if needed) and Kafka's persistent paths.

        ``auth`` authenticates the session with ZooKeeper's digest scheme (sent again on
        every reconnect); ``set_acl`` (Kafka's ``zookeeper.set.acl``, needs ``auth``, else
        ValueError) creates every node with the secure ACLs and secures the existing tree
        at start (module docstring; rules in ``tidelog.zk.security``).
        """
        client = cls(
            connect,
            session_timeout_ms=session_timeout_ms,
            loop=asyncio.get_running_loop(),
            auth=auth,
            set_acl=set_acl,
        )
        timeout_s = connection_timeout_s or session_timeout_ms / 1000.0
        await asyncio.to_thread(client._start_blocking, timeout_s)
        return client

    def _start_blocking(self, timeout_s: float) -> None:
        if self._chroot:
            # Kafka's createChrootIfNecessary: the chroot must exist before we use it.
            # With the same identity and ACLs: the chroot's nodes are secured like ours.
            boot = AclKazooClient(
                auth=self.auth, set_acl=self.set_acl, hosts=self._hosts, timeout=timeout_s
            )
            try:
                boot.start(timeout=timeout_s)
                boot.ensure_path(self._chroot)
            except KazooException as exc:
                raise ZkError(f"cannot create chroot {self._chroot}: {exc!r}") from exc
            finally:
                boot.stop()
                boot.close()
        try:
            self._kz.start(timeout=timeout_s)
            for path in znodes.PERSISTENT_PATHS:
                self._kz.retry(self._kz.ensure_path, path)
            if self.set_acl:
                self._kz.retry(secure_existing_tree_blocking, self._kz)
        except Exception as exc:
            self._kz.stop()
            self._kz.close()
            raise ZkError(f"cannot connect to ZooKeeper at {self.connect_string}: {exc!r}") from exc

    async def close(self) -> None:
        """Close the session: our ephemeral nodes go at once (ZooKeeper deletes them)."""
        self._closing = True
        await asyncio.to_thread(self._close_blocking)

    def _close_blocking(self) -> None:
        self._kz.stop()
        self._kz.close()

    @property
    def session_id(self) -> int | None:
        client_id = self._kz.client_id
        return None if client_id is None else int(client_id[0])

    @property
    def connected(self) -> bool:
        return bool(self._kz.connected)

    # -- plumbing -----------------------------------------------------------------------------

    @property
    def kazoo(self) -> Any:
        """The kazoo client, for this package's other ZooKeeper stores (users, ACLs): only
        ``tidelog.zk`` may use it (import-linter keeps kazoo here)."""
        return self._kz

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking kazoo call in a worker thread; kazoo's failures become ZkError."""
        return await self._call(fn, *args)

    def to_loop(self, callback: Callable[..., None], *args: Any) -> None:
        """From a kazoo thread (a watch): run ``callback(*args)`` on the session's loop."""
        self._to_loop(callback, *args)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking kazoo call in a worker thread; wrap kazoo's failures."""
        try:
            return await asyncio.to_thread(fn, *args)
        except KazooException as exc:
            raise ZkError(f"ZooKeeper operation failed: {exc!r}") from exc

    def _commit(self, build: Callable[[Any], None]) -> list[Any]:
        """Blocking: run a multi-op built by ``build(tx)``, retried on connection loss.

        A retried multi-op may find its own first attempt's effects (NodeExists for our own
        ephemeral, BadVersion for our own write): callers resolve that by reading back.
        """

        def attempt() -> list[Any]:
            tx = self._kz.transaction()
            build(tx)
            return list(tx.commit())

        return list(self._kz.retry(attempt))

    def _to_loop(self, callback: Callable[..., None], *args: Any) -> None:
        """From a kazoo thread: run ``callback(*args)`` on our loop (dropped once closed)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is listening
            self._loop.call_soon_threadsafe(callback, *args)

    # -- session events -----------------------------------------------------------------------

    def add_session_listener(self, listener: Callable[[SessionEvent, int | None], None]) -> None:
        """``listener(event, broker_epoch)`` on the loop; broker_epoch only on REESTABLISHED."""
        self._session_listeners.append(listener)

    def _on_kazoo_state(self, state: str) -> None:
        # kazoo's connection thread: must not block. Decide the event, hand it to the loop.
        if self._closing:
            return
        if state == KazooState.SUSPENDED:
            event = SessionEvent.SUSPENDED
        elif state == KazooState.LOST:
            self._lost = True
            event = SessionEvent.EXPIRED
        elif not self._ever_connected:
            self._ever_connected = True  # the first connection is not news
            return
        elif self._lost:
            self._lost = False
            self._to_loop(self._on_new_session)
            return
        else:
            event = SessionEvent.RECONNECTED
        self._to_loop(self._notify, event, None)

    def _notify(self, event: SessionEvent, broker_epoch: int | None) -> None:
        log.info("ZooKeeper session %s (%s)", event.value, self.connect_string)
        for listener in list(self._session_listeners):
            try:
                listener(event, broker_epoch)
            except Exception:
                log.exception("session listener failed on %s", event)

    async def _register_again(self) -> int | None:
        """After a session expiry: redo what the lost session's ephemerals held; returns the
        new broker epoch (None here: a bare session registers nothing)."""
        return None

    def _on_new_session(self) -> None:
        # On the loop. Kafka's reinitialize(): register again, with a new broker epoch.
        async def reregister() -> None:
            epoch: int | None = None
            try:
                epoch = await self._register_again()
            except ZkError:
                log.exception("re-registration after session expiry failed")
            self._notify(SessionEvent.REESTABLISHED, epoch)

        task = self._loop.create_task(reregister())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- watches ------------------------------------------------------------------------------

    async def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> Watch:
        """``callback(children)`` on the loop now and after every change of ``path``'s children.

        kazoo re-arms the watch after reconnects and session expiry (and calls again then).
        """
        handle = Watch()

        def fire(children: list[str]) -> bool:
            if handle.cancelled or self._closing:
                return False
            self._to_loop(callback, sorted(children))
            return True

        await self._call(ChildrenWatch, self._kz, path, fire)
        return handle

    async def watch_data(self, path: str, callback: Callable[[bytes | None, int], None]) -> Watch:
        """``callback(data, version)`` on the loop now and after every change of ``path``.

        ``data`` is None (version -1) while the node does not exist.
        """
        handle = Watch()

        def fire(data: bytes | None, stat: Any, _event: Any = None) -> bool:
            if handle.cancelled or self._closing:
                return False
            self._to_loop(callback, data, -1 if stat is None else int(stat.version))
            return True

        await self._call(DataWatch, self._kz, path, fire)
        return handle

    # -- cluster id ---------------------------------------------------------------------------

    async def get_or_create_cluster_id(self) -> str:
        """``/cluster/id``: created once with a fresh Kafka-style Uuid, then read forever."""

        def run() -> str:
            new_id = znodes.encode_uuid(uuid.uuid4())
            try:
                self._kz.retry(
                    self._kz.create,
                    znodes.CLUSTER_ID_PATH,
                    znodes.encode_cluster_id(new_id),
                    makepath=True,
                )
            except NodeExistsError:
                data, _ = self._kz.retry(self._kz.get, znodes.CLUSTER_ID_PATH)
                return znodes.decode_cluster_id(data)
            return new_id

        return await self._call(run)

    async def ensure_feature_znode(self) -> None:
        """``/feature`` created with nothing finalized unless it exists (KIP-584; Kafka's
        controller creates it so at its election)."""

        def run() -> None:
            with contextlib.suppress(NodeExistsError):
                self._kz.retry(
                    self._kz.create, znodes.FEATURE_PATH, znodes.encode_feature_znode({})
                )

        await self._call(run)

    async def set_feature_znode(self, levels: Mapping[str, int], version: int) -> None:
        """``/feature`` finalizing ``levels``, if its data version is still ``version``
        (else kazoo's BadVersionError, as a ``ZkError``)."""
        data = znodes.encode_feature_znode(levels)
        await self._call(self._kz.set, znodes.FEATURE_PATH, data, version)


async def secure_existing_tree(
    zk: ZkSession,
    *,
    unsecure: bool = False,
    roots: Iterable[str] = KAFKA_ROOT_PATHS,
) -> SecureTreeReport:
    """``secure_existing_tree_blocking`` on ``zk``'s session, in a worker thread (kazoo's
    failures become ``ZkError``). ``zk`` must have been connected with ``auth`` for the
    secure ACLs (and with ``set_acl`` for them to be chosen)."""
    kz = zk.kazoo
    if not isinstance(kz, AclKazooClient):  # pragma: no cover - ZkSession always makes one
        raise TypeError("secure_existing_tree needs a ZkSession's AclKazooClient")
    walk = functools.partial(
        secure_existing_tree_blocking, kz, unsecure=unsecure, roots=tuple(roots)
    )
    return await zk.call(walk)
