"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546: what
``kafka-configs.sh --entity-type users|clients`` and ``Admin.describeClientQuotas`` /
``alterClientQuotas`` send, answered as Kafka's ZooKeeper-mode ``ZkAdminManager``.

Rules:

1. Authorization first: DESCRIBE_CONFIGS resp. ALTER_CONFIGS on the cluster
   (``authorize_cluster``). Refused: CLUSTER_AUTHORIZATION_FAILED (31) "Cluster
   authorization failed." at the top (Describe, no entries) or for every entry (Alter).
2. Describe's filter: at most one component per entity type, else INVALID_REQUEST
   "Duplicate user filter component entity type" (resp. "client"); an empty type is
   INVALID_REQUEST "Unexpected empty filter component entity type"; a type other than
   ``user``, ``client-id``, ``ip`` UNSUPPORTED_VERSION "Custom entity type '<t>' not
   supported"; ``ip`` beside user or client-id INVALID_REQUEST "Invalid entity filter
   component combination, IP filter component should not be used with user or clientId
   filter component."; a match type outside 0-2 INVALID_REQUEST "Unexpected match type:
   <n>". Errors are top-level, entries null.
3. A component matches an entity having that type with the exact name (match type 0),
   the default name (1) or any name (2). With ``strict`` an entity must have no type the
   filter does not name. Entities without quota values are left out; values are the quota
   keys only (a user's SCRAM credentials are not quotas).
4. Alter validates each entry on its own (its error is its own): no components
   INVALID_REQUEST "Invalid empty client quota entity", an empty type INVALID_REQUEST
   "Invalid empty client quota entity type", a type twice INVALID_REQUEST "Duplicate
   <t> entity type in the quota entity", a type other than ``user``/``client-id``
   UNSUPPORTED_VERSION "Unsupported client quota entity type <t>" (IP quotas are not
   kept here), then each op (``entity.check_op``). Ops apply in order to the entity's
   config; ``validate_only`` writes nothing. A store failure is UNKNOWN_SERVER_ERROR.
5. Answers are futures: in a cluster the configs are ZooKeeper's (``QuotaConfigs``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final

from tidelog.errors import ErrorCode
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.codec import RequestHeader
from tidelog.server.apis.answer_tasks import AnswerTasks
from tidelog.server.quotas.configs import QuotaConfigs
from tidelog.server.quotas.entity import (
    CLIENT_ID,
    DEFAULT,
    IP,
    OK,
    USER,
    Outcome,
    QuotaEntity,
    check_op,
    quota_values,
    sanitize,
)

log = logging.getLogger(__name__)

CLUSTER_AUTHORIZATION_FAILED_MESSAGE: Final = "Cluster authorization failed."
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2

#: A describe filter: entity type -> (match type, sanitized name for exact matches).
Filter = dict[str, tuple[int, str | None]]


def _allow(_operation: str) -> bool:
    return True


def parse_filter(components: list[Any]) -> tuple[Filter, Outcome]:
    """Rule 2: the filter of Describe's components, or the error."""
    out: Filter = {}
    for c in components:
        kind, match_type = str(c.entity_type), int(c.match_type)
        if kind == "":
            return {}, (ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type")
        if kind not in (USER, CLIENT_ID, IP):
            return {}, (ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{kind}' not supported")
        if kind in out:
            which = "user" if kind == USER else "client" if kind == CLIENT_ID else "IP"
            return {}, (
                ErrorCode.INVALID_REQUEST,
                f"Duplicate {which} filter component entity type",
            )
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            return {}, (ErrorCode.INVALID_REQUEST, f"Unexpected match type: {match_type}")
        name = None if c.match is None else sanitize(str(c.match))
        if match_type == MATCH_EXACT and name is None:
            match_type = MATCH_DEFAULT
        out[kind] = (match_type, name)
    if IP in out and (USER in out or CLIENT_ID in out):
        return {}, (
            ErrorCode.INVALID_REQUEST,
            "Invalid entity filter component combination, IP filter component should not "
            "be used with user or clientId filter component.",
        )
    return out, OK


def matches(entity: QuotaEntity, flt: Filter, *, strict: bool) -> bool:
    """Rule 3."""
    if IP in flt:
        return False  # no IP entities are kept here
    for kind, value in ((USER, entity.user), (CLIENT_ID, entity.client_id)):
        wanted = flt.get(kind)
        if wanted is None:
            if strict and value is not None:
                return False
            continue
        match_type, name = wanted
        if value is None:
            return False
        if match_type == MATCH_DEFAULT and value != DEFAULT:
            return False
        if match_type == MATCH_EXACT and value != name:
            return False
    return True


def parse_entity(components: list[Any]) -> tuple[QuotaEntity | None, Outcome]:
    """Rule 4's entity checks."""
    if not components:
        return None, (ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
    names: dict[str, str | None] = {}
    for c in components:
        kind = str(c.entity_type)
        if kind == "":
            return None, (ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity type")
        if kind in names:
            return None, (
                ErrorCode.INVALID_REQUEST,
                f"Duplicate {kind} entity type in the quota entity",
            )
        if kind not in (USER, CLIENT_ID):
            return None, (
                ErrorCode.UNSUPPORTED_VERSION,
                f"Unsupported client quota entity type {kind}",
            )
        names[kind] = None if c.entity_name is None else str(c.entity_name)
    return QuotaEntity.from_wire(names), OK


def apply_ops(config: Mapping[str, str], ops: list[tuple[str, str | None]]) -> dict[str, str]:
    """The entity's config after checked ops (``(key, text or None: remove)``)."""
    new = dict(config)
    for key, text in ops:
        if text is None:
            new.pop(key, None)
        else:
            new[key] = text
    return new


def _entity_data(entity: QuotaEntity) -> list[dict[str, Any]]:
    return [{"entity_type": kind, "entity_name": name} for kind, name in entity.to_wire()]


class ClientQuotaApis:
    """The two handlers over the broker's quota configs (rules 1-5)."""

    def __init__(
        self,
        configs: QuotaConfigs,
        *,
        authorize_cluster: Callable[[str], bool] = _allow,
    ) -> None:
        self.configs = configs
        self.authorize_cluster = authorize_cluster
        self._answers = AnswerTasks()

    def handlers(self) -> dict[int, Callable[[RequestHeader, Any], Any]]:
        return {
            ApiKey.DESCRIBE_CLIENT_QUOTAS: self.handle_describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: self.handle_alter_client_quotas,
        }

    def _spawn(
        self, header: RequestHeader, work: Coroutine[Any, Any, Mapping[str, Any]]
    ) -> asyncio.Future[Any]:
        return self._answers.spawn(header, work)

    # --- DescribeClientQuotas (48) ---------------------------------------------------------

    def handle_describe_client_quotas(self, header: RequestHeader, body: Any) -> Any:
        allowed = self.authorize_cluster("DESCRIBE_CONFIGS")  # before any await
        return self._spawn(
            header, self.describe(list(body.components), bool(body.strict), allowed=allowed)
        )

    async def describe(
        self, components: list[Any], strict: bool, *, allowed: bool = True
    ) -> dict[str, Any]:
        """The response's data (rules 1-3)."""
        if not allowed:
            return _describe_error(
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED_MESSAGE
            )
        flt, (error, message) = parse_filter(components)
        if error != ErrorCode.NONE:
            return _describe_error(error, message)
        try:
            configs = await self.configs.read()
        except Exception as exc:
            log.exception("describing client quotas failed")
            return _describe_error(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        entries = []
        for entity, config in sorted(configs.items(), key=lambda item: item[0].describe()):
            values = quota_values(config)
            if not values or not matches(entity, flt, strict=strict):
                continue
            entries.append(
                {
                    "entity": _entity_data(entity),
                    "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
                }
            )
        return {"error_code": ErrorCode.NONE, "error_message": None, "entries": entries}

    # --- AlterClientQuotas (49) ------------------------------------------------------------

    def handle_alter_client_quotas(self, header: RequestHeader, body: Any) -> Any:
        allowed = self.authorize_cluster("ALTER_CONFIGS")
        return self._spawn(
            header, self.alter(list(body.entries), bool(body.validate_only), allowed=allowed)
        )

    async def alter(
        self, entries: list[Any], validate_only: bool, *, allowed: bool = True
    ) -> dict[str, Any]:
        """The response's data (rules 1, 4)."""
        results = []
        for entry in entries:
            components = list(entry.entity)
            wire = [
                {"entity_type": str(c.entity_type), "entity_name": c.entity_name}
                for c in components
            ]
            outcome: Outcome = (
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                CLUSTER_AUTHORIZATION_FAILED_MESSAGE,
            )
            if allowed:
                outcome = await self._alter_one(components, list(entry.ops), validate_only)
            error, message = outcome
            results.append({"error_code": error, "error_message": message, "entity": wire})
        return {"entries": results}

    async def _alter_one(
        self, components: list[Any], ops: list[Any], validate_only: bool
    ) -> Outcome:
        entity, outcome = parse_entity(components)
        if entity is None:
            return outcome
        checked: list[tuple[str, str | None]] = []
        for op in ops:
            value = None if op.remove else float(op.value)
            text, outcome = check_op(str(op.key), value)
            if outcome != OK:
                return outcome
            checked.append((str(op.key), text))
        if validate_only:
            return OK
        try:
            await self.configs.alter(entity, lambda config: apply_ops(config, checked))
        except Exception as exc:
            log.exception("altering the client quotas of %s failed", entity.describe())
            return ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)
        log.info("altered the client quotas of %s: %s", entity.describe(), checked)
        return OK


def _describe_error(error: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"error_code": error, "error_message": message, "entries": None}


__all__ = [
    "CLUSTER_AUTHORIZATION_FAILED_MESSAGE",
    "ClientQuotaApis",
    "apply_ops",
    "matches",
    "parse_entity",
    "parse_filter",
]
