"""ZooKeeper security: digest authentication and znode ACLs (Kafka's ``zookeeper.set.acl``).

Without this, anyone who can reach the ZooKeeper port can rewrite partition state, delete
broker registrations or read SCRAM credentials. Kafka's answer, kept here:

1. **Authentication.** The broker authenticates its ZooKeeper session with ZooKeeper's own
   digest scheme (``addauth digest user:password``), configured as
   ``tidelog.zookeeper.digest=user:password`` (``ZkAuth.parse``). The credential is given to
   kazoo as ``auth_data``, so it is sent again on every reconnect and every new session.
   ZooKeeper accepts any digest credential; what it decides is which *ACL id* a session
   has: ``digest:user:base64(sha1(user:password))``. Brokers of one cluster therefore share
   one digest identity (as Kafka's brokers share one JAAS ``Client`` principal).
2. **ACLs on the nodes we create** (``zookeeper.set.acl=true``, Kafka's
   ``ZkData.defaultAcls(isSecure=true, path)``): the broker identity gets ALL; the world
   (``world:anyone``) gets READ — clients and tools may read the cluster layout, as in Kafka
   — except on *sensitive* paths, where the world gets nothing. Sensitive means "holds
   credentials", Kafka's ``ZkData.SensitiveRootPaths``: ``/config/users`` (SCRAM
   credentials), ``/config/brokers`` (dynamic broker configs, whose passwords are stored
   there encrypted) and ``/delegation_token``, each with its whole subtree. ``/kafka-acl*``
   is *not* sensitive: it is world-readable in Kafka, and so here. ``set_acl`` without
   credentials is refused (``ValueError`` naming ``zookeeper.set.acl``), as Kafka refuses
   to start: ALL for "the broker identity" would mean ALL for nobody.
3. **Automatic ACLs.** Every module of ``tidelog.zk`` creates znodes through one
   ``AclKazooClient``, so the ACL choice lives there and not at each call site. kazoo's own
   ``default_acl`` is one list for every path, which cannot express "no world READ under
   ``/config/users``"; ``AclKazooClient`` therefore leaves ``default_acl`` unset and picks
   ``acls_for(path)`` whenever a create is given no explicit ``acl``: in ``create`` /
   ``create_async``, in ``ensure_path`` (each missing ancestor gets the ACL of *its own*
   path, not that of the leaf), in ``create(..., makepath=True)`` likewise, and in
   transactions' ``create``. An explicit ``acl`` argument always wins.
4. **Securing an existing tree** (Kafka's ``zookeeper-security-migration.sh``):
   ``secure_existing_tree_blocking`` (``tidelog.zk.session.secure_existing_tree`` on a
   session) walks Kafka's root paths (and the chroot node itself) and sets
   each node's ACL to ``acls_for(path)``, or back to world-ALL with ``unsecure=True``. A
   broker with ``set_acl`` runs it at start: nodes left open by an earlier unsecured run
   would otherwise stay writable by anyone. Nodes whose ACL already matches are left alone
   (one ``getACL`` each, pipelined). A node we may not change (ZooKeeper's ADMIN permission
   belongs to another identity) is skipped; the walk logs them once, at the end, and goes
   on. ``setACL`` needs ADMIN on the node and nothing on its parent, so securing a parent
   never locks us out of its children.

ACLs are checked by the server per node and are not inherited: a node created with the
open ACL below a secured parent stays open, which is why (3) covers every create path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import (
    ACL,
    ANYONE_ID_UNSAFE,
    OPEN_ACL_UNSAFE,
    Id,
    Permissions,
    make_digest_acl_credential,
)

log = logging.getLogger(__name__)

#: The broker setting holding the ZooKeeper digest credential, ``user:password``.
DIGEST_CONFIG_KEY: Final = "tidelog.zookeeper.digest"
#: Kafka's broker setting: create znodes with secure ACLs.
SET_ACL_CONFIG_KEY: Final = "zookeeper.set.acl"

#: Kafka's ``ZkData.SensitiveRootPaths``: subtrees holding credentials; no world READ.
SENSITIVE_ROOT_PATHS: Final = ("/config/users", "/config/brokers", "/delegation_token")

#: The roots the migration walks (Kafka's ``ZkData.SecureRootPaths``, the ZooKeeper-era
#: paths a broker owns; ``/zookeeper`` — the server's own — is never touched).
KAFKA_ROOT_PATHS: Final = (
    "/admin",
    "/brokers",
    "/cluster",
    "/config",
    "/controller",
    "/controller_epoch",
    "/isr_change_notification",
    "/latest_producer_id_block",
    "/log_dir_event_notification",
    "/delegation_token",
    "/feature",
    "/kafka-acl",
    "/kafka-acl-changes",
    "/kafka-acl-extended",
    "/kafka-acl-extended-changes",
)

#: At most this many ZooKeeper requests in flight during the migration walk.
_BATCH: Final = 500
#: Paths named in the one warning about nodes the migration could not change.
_DENIED_SHOWN: Final = 5


@dataclass(frozen=True, slots=True)
class ZkAuth:
    """A ZooKeeper digest credential (``tidelog.zookeeper.digest=user:password``).

    The user may not be empty or contain ``:``; the password may not be empty (it may
    contain ``:``: ZooKeeper splits the credential at the first one). The password is kept
    out of ``repr``.
    """

    digest_user: str
    digest_password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not self.digest_user or ":" in self.digest_user:
            raise ValueError(
                f"{DIGEST_CONFIG_KEY}: the user must be non-empty and must not contain ':'"
            )
        if not self.digest_password:
            raise ValueError(f"{DIGEST_CONFIG_KEY}: the password must not be empty")

    @classmethod
    def parse(cls, value: str) -> ZkAuth:
        """``"user:password"`` -> ``ZkAuth``; ValueError (naming the setting) otherwise."""
        user, colon, password = value.partition(":")
        if not colon:
            raise ValueError(f"{DIGEST_CONFIG_KEY} must be 'user:password' (no ':' found)")
        return cls(user, password)

    @property
    def auth_data(self) -> tuple[str, str]:
        """kazoo's ``auth_data`` entry: ``("digest", "user:password")``."""
        return ("digest", f"{self.digest_user}:{self.digest_password}")

    @property
    def acl_id(self) -> str:
        """The digest ACL id ``user:base64(sha1(user:password))`` of sessions using this."""
        return str(make_digest_acl_credential(self.digest_user, self.digest_password))


def is_sensitive(path: str) -> bool:
    """True for ``SENSITIVE_ROOT_PATHS`` and everything below them (chroot-relative path)."""
    path = "/" + path.strip("/")
    return any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOT_PATHS)


def secure_acls(auth: ZkAuth, path: str) -> list[ACL]:
    """Kafka's ``defaultAcls(isSecure=true, path)``: ALL for ``auth``'s identity, plus
    READ for the world unless ``path`` is sensitive."""
    acls = [ACL(Permissions.ALL, Id("digest", auth.acl_id))]
    if not is_sensitive(path):
        acls.append(ACL(Permissions.READ, ANYONE_ID_UNSAFE))
    return acls


class _PathAcl(list[Any]):
    """An ACL chosen by ``AclKazooClient.acls_for`` rather than given by the caller.

    kazoo hands a create's ACL on to the ancestors ``makepath`` creates; this marker lets
    ``ensure_path_async`` recognise it and choose each ancestor's ACL by its own path.
    """


class AclKazooClient(KazooClient):  # type: ignore[misc]  # kazoo is untyped
    """A ``KazooClient`` that authenticates with ``auth`` and, with ``set_acl``, creates
    every node with ``acls_for(path)`` unless told otherwise (module docstring, 2-3).

    ``kazoo_kwargs`` are ``KazooClient``'s (``hosts``, ``timeout``, retries...); do not pass
    ``auth_data`` or ``default_acl``: they come from ``auth`` and ``set_acl``.
    """

    def __init__(self, *, auth: ZkAuth | None, set_acl: bool, **kazoo_kwargs: Any) -> None:
        if set_acl and auth is None:
            raise ValueError(
                f"{SET_ACL_CONFIG_KEY}=true needs ZooKeeper credentials: set "
                f"{DIGEST_CONFIG_KEY}=user:password (or set {SET_ACL_CONFIG_KEY}=false)"
            )
        super().__init__(auth_data=[auth.auth_data] if auth else None, **kazoo_kwargs)
        self.zk_auth = auth
        self.set_acl = set_acl

    def acls_for(self, path: str) -> list[ACL]:
        """The ACL a node at ``path`` (chroot-relative) is created with: ``secure_acls``
        with ``set_acl``, kazoo's world-ALL otherwise."""
        if self.set_acl and self.zk_auth is not None:
            return secure_acls(self.zk_auth, path)
        return list(OPEN_ACL_UNSAFE)

    def create_async(  # noqa: PLR0917 - kazoo's own signature
        self,
        path: str,
        value: bytes = b"",
        acl: list[ACL] | None = None,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
        include_data: bool = False,
    ) -> Any:
        """``KazooClient.create_async`` choosing ``acls_for(path)`` when ``acl`` is None
        (``create`` comes here too)."""
        if acl is None:
            acl = _PathAcl(self.acls_for(path))
        return super().create_async(
            path,
            value,
            acl=acl,
            ephemeral=ephemeral,
            sequence=sequence,
            makepath=makepath,
            include_data=include_data,
        )

    def ensure_path_async(self, path: str, acl: list[ACL] | None = None) -> Any:
        """``KazooClient.ensure_path_async``; each node it creates gets the ACL of its own
        path unless the caller gave one explicitly (``ensure_path`` comes here too)."""
        if isinstance(acl, _PathAcl):
            acl = None
        return super().ensure_path_async(path, acl)

    def transaction(self) -> Any:
        """A transaction whose ``create`` without ``acl`` uses ``acls_for(path)``."""
        return _AclTransaction(self)


class _AclTransaction(TransactionRequest):  # type: ignore[misc]  # kazoo is untyped
    def create(
        self,
        path: str,
        value: bytes = b"",
        acl: list[ACL] | None = None,
        ephemeral: bool = False,
        sequence: bool = False,
    ) -> None:
        if acl is None:
            acl = self.client.acls_for(path)
        super().create(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence)


# -- securing an existing tree (rule 4) -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SecureTreeReport:
    """What one walk did: nodes whose ACL it changed, nodes already right, and nodes it was
    not allowed to change (or read)."""

    changed: int = 0
    unchanged: int = 0
    denied: tuple[str, ...] = ()


def secure_existing_tree_blocking(
    kz: AclKazooClient,
    *,
    unsecure: bool = False,
    roots: Iterable[str] = KAFKA_ROOT_PATHS,
) -> SecureTreeReport:
    """Blocking: set ``kz.acls_for(path)`` (world-ALL with ``unsecure``) on every node under
    ``roots`` and on the chroot node (rule 4). Safe to run concurrently with other brokers
    and to repeat: nodes that vanish meanwhile are skipped, matching ACLs are not rewritten.
    Other failures (connection loss...) raise kazoo's exception; the walk may then simply be
    run again. Securing needs a client with ``set_acl`` (ValueError otherwise: its
    ``acls_for`` is the open ACL, so "securing" would open the tree).
    """
    if not unsecure and not kz.set_acl:
        raise ValueError(f"securing the ZooKeeper tree needs a client with {SET_ACL_CONFIG_KEY}")

    def target(path: str) -> list[ACL]:
        return list(OPEN_ACL_UNSAFE) if unsecure else kz.acls_for(path)

    changed = unchanged = 0
    denied: list[str] = []
    if kz.chroot:
        # The chroot node itself ("/" of this client), never its children wholesale: only
        # Kafka's roots below it are ours to walk (and without a chroot "/" is not ours).
        outcome = _fix_node_acls(kz, ["/"], target, denied)
        changed += outcome[0]
        unchanged += outcome[1]
    level = [_normalise(root) for root in roots]
    while level:
        existing: list[str] = []
        for batch in _batches(level):
            c, u = _fix_node_acls(kz, batch, target, denied, existing)
            changed += c
            unchanged += u
        level = []
        for batch in _batches(existing):
            pending = [(path, kz.get_children_async(path)) for path in batch]
            for path, result in pending:
                try:
                    children = result.get()
                except NoNodeError:
                    continue
                except NoAuthError:
                    denied.append(path)
                    continue
                level.extend(f"{path.rstrip('/')}/{child}" for child in sorted(children))
    if denied:
        shown = ", ".join(denied[:_DENIED_SHOWN])
        more = f" and {len(denied) - _DENIED_SHOWN} more" if len(denied) > _DENIED_SHOWN else ""
        log.warning(
            "ZooKeeper ACLs: not allowed to %s %d node(s), left as they are: %s%s "
            "(owned by another identity?)",
            "unsecure" if unsecure else "secure",
            len(denied),
            shown,
            more,
        )
    if changed:
        log.info("ZooKeeper ACLs: %s %d node(s)", "opened" if unsecure else "secured", changed)
    return SecureTreeReport(changed=changed, unchanged=unchanged, denied=tuple(denied))


def _fix_node_acls(
    kz: AclKazooClient,
    paths: list[str],
    target: Callable[[str], list[ACL]],
    denied: list[str],
    existing: list[str] | None = None,
) -> tuple[int, int]:
    """Give each of ``paths`` its target ACL (pipelined); appends the paths that exist to
    ``existing`` and those we may not change to ``denied``; returns (changed, unchanged)."""
    changed = unchanged = 0
    reads = [(path, kz.get_acls_async(path)) for path in paths]
    writes: list[tuple[str, Any]] = []
    for path, result in reads:
        try:
            acls, _stat = result.get()
        except NoNodeError:
            continue
        except NoAuthError:  # ZooKeeper >= 3.5 wants READ or ADMIN for getACL
            denied.append(path)
            continue
        if existing is not None:
            existing.append(path)
        wanted = target(path)
        if _acl_set(acls) == _acl_set(wanted):
            unchanged += 1
        else:
            writes.append((path, kz.set_acls_async(path, wanted)))
    for path, result in writes:
        try:
            result.get()
        except NoNodeError:
            continue
        except NoAuthError:
            denied.append(path)
            continue
        changed += 1
    return changed, unchanged


def _acl_set(acls: Iterable[Any]) -> frozenset[tuple[int, str, str]]:
    return frozenset((int(a.perms), str(a.id.scheme), str(a.id.id)) for a in acls)


def _normalise(path: str) -> str:
    return "/" + path.strip("/")


def _batches(items: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(items), _BATCH):
        yield items[start : start + _BATCH]
