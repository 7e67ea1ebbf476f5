"""DescribeUserScramCredentials (50, v0) and AlterUserScramCredentials (51, v0): KIP-554,
what ``kafka-configs.sh --entity-type users`` and ``Admin.describeUserScramCredentials`` /
``alterUserScramCredentials`` send, answered as Kafka's ZooKeeper-mode ``ZkAdminManager``.

Rules:

1. Authorization first: DESCRIBE resp. ALTER on the cluster (``authorize_cluster``, default
   allow). Refused: every named user is answered CLUSTER_AUTHORIZATION_FAILED (31) with
   Kafka's "Cluster authorization failed." (Describe also at the top level), as Kafka's
   ``getErrorResponse``. Alter on a broker that is not the controller (when
   ``is_controller`` is given) is NOT_CONTROLLER (41) per user, checked before that.
2. Describe: no users (null or empty) = every user with a credential, by name. Named users:
   one result per distinct name in request order; an empty name is RESOURCE_NOT_FOUND (91)
   "An empty user name is illegal", a name given twice DUPLICATE_RESOURCE (92) "Cannot
   describe SCRAM credentials for the same user twice in a single request: <u>", a user
   without credentials RESOURCE_NOT_FOUND "Attempt to describe a user credential that does
   not exist: <u>". Credential infos are (mechanism type, iterations), by type.
3. Alter validates per user; one bad entry fails the user's whole alteration (nothing of it
   is written): an empty name is UNACCEPTABLE_CREDENTIAL (93) "Username must not be
   empty", an unknown mechanism type UNSUPPORTED_SASL_MECHANISM (33) "Unknown SCRAM
   mechanism", iterations outside 4096..16384 UNACCEPTABLE_CREDENTIAL "Too few iterations"
   / "Too many iterations"; the same (user, mechanism) twice in one request (as upsertion
   or deletion) DUPLICATE_RESOURCE "A user credential cannot be altered twice in the same
   request" — one user may alter both mechanisms at once, as kafka-configs.sh does. A
   deletion of a credential the user does not have is RESOURCE_NOT_FOUND "Attempt to
   delete a user credential that does not exist".
4. Upsertions carry salt and salted password (KIP-554: the password never reaches the
   broker); the broker derives StoredKey and ServerKey
   (``credential_from_salted_password``). A user's deletions and upsertions are written in
   one compare-and-set (``ZkUserCredentialStore.alter``); a store failure is that user's
   UNKNOWN_SERVER_ERROR (-1). Results are one per user, sorted by name.
5. Answers are futures: the store is ZooKeeper. Authentication uses the credential cache,
   which follows the writes through its watches (as Kafka's brokers follow
   ``/config/changes``): within milliseconds, not within this request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final

from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.security.scram import (
    MAX_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    credential_from_salted_password,
)
from tidelog.server.apis.answer_tasks import AnswerTasks
from tidelog.server.auth.credentials import UserCredentialStore

log = logging.getLogger(__name__)

CLUSTER_AUTHORIZATION_FAILED_MESSAGE: Final = "Cluster authorization failed."
NOT_CONTROLLER_MESSAGE: Final = "This is not the correct controller for this cluster."


def _allow(_operation: str) -> bool:
    return True


def _user_result(user: str, error: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {"user": user, "error_code": error, "error_message": message}


def credential_infos(creds: Mapping[ScramMechanism, ScramCredential]) -> list[dict[str, int]]:
    """Describe's ``credential_infos``, by mechanism type."""
    return [
        {"mechanism": m.type_id, "iterations": c.iterations}
        for m, c in sorted(creds.items(), key=lambda item: item[0].type_id)
    ]


def validate_upsertion(name: str, mechanism: int, iterations: int) -> tuple[ErrorCode, str]:
    """Rule 3 for one upsertion: (NONE, "") when acceptable."""
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    scram = ScramMechanism.from_type(mechanism)
    if scram is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if iterations < scram.min_iterations:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return ErrorCode.NONE, ""


def validate_deletion(name: str, mechanism: int) -> tuple[ErrorCode, str]:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if ScramMechanism.from_type(mechanism) is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return ErrorCode.NONE, ""


class ScramCredentialApis:
    """The two handlers over one store (rules 1-5)."""

    def __init__(
        self,
        store: UserCredentialStore,
        *,
        authorize_cluster: Callable[[str], bool] = _allow,
        is_controller: Callable[[], bool] | None = None,
    ) -> None:
        self.store = store
        self.authorize_cluster = authorize_cluster
        self.is_controller = is_controller
        self._answers = AnswerTasks()

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.handle_describe_user_scram_credentials,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.handle_alter_user_scram_credentials,
        }

    def _spawn(
        self, header: RequestHeader, work: Coroutine[Any, Any, Mapping[str, Any]]
    ) -> asyncio.Future[Any]:
        return self._answers.spawn(header, work)

    # --- DescribeUserScramCredentials (50) -------------------------------------------------

    def handle_describe_user_scram_credentials(
        self, header: RequestHeader, body: Any
    ) -> asyncio.Future[Any]:
        users = None if body.users is None else [str(u.name) for u in body.users]
        # The authorizer reads the request context now, before any await.
        allowed = self.authorize_cluster("DESCRIBE")
        return self._spawn(header, self.describe(users, allowed=allowed))

    async def describe(self, users: list[str] | None, *, allowed: bool = True) -> dict[str, Any]:
        """The response's data (rules 1, 2)."""
        if not allowed:
            error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            message = CLUSTER_AUTHORIZATION_FAILED_MESSAGE
            return {
                "error_code": error,
                "error_message": message,
                "results": [_user_result(u, error, message) for u in dict.fromkeys(users or [])],
            }
        if not users:
            try:
                everyone = await self.store.list_users()
            except Exception as exc:
                log.exception("describing SCRAM credentials failed")
                return {
                    "error_code": ErrorCode.UNKNOWN_SERVER_ERROR,
                    "error_message": f"Error describing SCRAM credentials: {exc}",
                    "results": [],
                }
            return {
                "error_code": ErrorCode.NONE,
                "error_message": None,
                "results": [
                    {**_user_result(u, ErrorCode.NONE), "credential_infos": credential_infos(c)}
                    for u, c in sorted(everyone.items())
                    if c
                ],
            }
        counts: dict[str, int] = {}
        for user in users:
            counts[user] = counts.get(user, 0) + 1
        results = [await self._describe_one(user, counts[user]) for user in counts]
        return {"error_code": ErrorCode.NONE, "error_message": None, "results": results}

    async def _describe_one(self, user: str, count: int) -> dict[str, Any]:
        if not user:
            return _user_result(user, ErrorCode.RESOURCE_NOT_FOUND, "An empty user name is illegal")
        if count > 1:
            return _user_result(
                user,
                ErrorCode.DUPLICATE_RESOURCE,
                "Cannot describe SCRAM credentials for the same user twice in a single "
                f"request: {user}",
            )
        try:
            creds = await self.store.get(user)
        except Exception as exc:
            log.exception("describing the SCRAM credentials of user %r failed", user)
            return _user_result(
                user,
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"Error retrieving SCRAM credentials for user {user}: {exc}",
            )
        if not creds:
            return _user_result(
                user,
                ErrorCode.RESOURCE_NOT_FOUND,
                f"Attempt to describe a user credential that does not exist: {user}",
            )
        return {**_user_result(user, ErrorCode.NONE), "credential_infos": credential_infos(creds)}

    # --- AlterUserScramCredentials (51) ----------------------------------------------------

    def handle_alter_user_scram_credentials(
        self, header: RequestHeader, body: Any
    ) -> asyncio.Future[Any]:
        refusal: tuple[ErrorCode, str] | None = None
        if self.is_controller is not None and not self.is_controller():
            refusal = (ErrorCode.NOT_CONTROLLER, NOT_CONTROLLER_MESSAGE)
        elif not self.authorize_cluster("ALTER"):
            refusal = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED_MESSAGE)
        return self._spawn(
            header, self.alter(list(body.upsertions), list(body.deletions), refusal=refusal)
        )

    async def alter(
        self,
        upsertions: list[Any],
        deletions: list[Any],
        *,
        refusal: tuple[ErrorCode, str] | None = None,
    ) -> dict[str, Any]:
        """The response's data (rules 1, 3, 4). ``upsertions`` have ``name``, ``mechanism``,
        ``iterations``, ``salt``, ``salted_password``; ``deletions`` ``name``, ``mechanism``
        (the request's entities)."""
        names = sorted({str(u.name) for u in upsertions} | {str(d.name) for d in deletions})
        if refusal is not None:
            return {"results": [_user_result(u, *refusal) for u in names]}
        errors: dict[str, tuple[ErrorCode, str]] = {}
        for u in upsertions:
            code, message = validate_upsertion(str(u.name), int(u.mechanism), int(u.iterations))
            if code != ErrorCode.NONE:
                errors.setdefault(str(u.name), (code, message))
        for d in deletions:
            code, message = validate_deletion(str(d.name), int(d.mechanism))
            if code != ErrorCode.NONE:
                errors.setdefault(str(d.name), (code, message))
        seen: set[tuple[str, int]] = set()
        for entry in [*upsertions, *deletions]:
            name, pair = str(entry.name), (str(entry.name), int(entry.mechanism))
            if name in errors:
                continue
            if pair in seen:
                errors[name] = (
                    ErrorCode.DUPLICATE_RESOURCE,
                    "A user credential cannot be altered twice in the same request",
                )
            seen.add(pair)
        results = []
        for user in names:
            if user in errors:
                results.append(_user_result(user, *errors[user]))
                continue
            results.append(await self._alter_one(user, upsertions, deletions))
        return {"results": results}

    async def _alter_one(
        self, user: str, upsertions: list[Any], deletions: list[Any]
    ) -> dict[str, Any]:
        ups: dict[ScramMechanism, ScramCredential] = {}
        for u in upsertions:
            if str(u.name) != user:
                continue
            mechanism = ScramMechanism.from_type(int(u.mechanism))
            assert mechanism is not None  # validated
            ups[mechanism] = credential_from_salted_password(
                mechanism, bytes(u.salt), bytes(u.salted_password), int(u.iterations)
            )
        dels: set[ScramMechanism] = set()
        for d in deletions:
            mechanism = ScramMechanism.from_type(int(d.mechanism))
            if str(d.name) == user and mechanism is not None:
                dels.add(mechanism)
        try:
            done = await self.store.alter(user, ups, dels)
        except Exception as exc:
            log.exception("altering the SCRAM credentials of user %r failed", user)
            return _user_result(user, ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        if not done:
            return _user_result(
                user,
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        log.info(
            "altered the SCRAM credentials of user %r: %s",
            user,
            ", ".join(
                [f"upserted {m.value} ({c.iterations} iterations)" for m, c in ups.items()]
                + [f"deleted {m.value}" for m in sorted(dels, key=lambda m: m.type_id)]
            ),
        )
        return _user_result(user, ErrorCode.NONE)


__all__ = [
    "CLUSTER_AUTHORIZATION_FAILED_MESSAGE",
    "NOT_CONTROLLER_MESSAGE",
    "ScramCredentialApis",
    "credential_infos",
    "validate_deletion",
    "validate_upsertion",
]
