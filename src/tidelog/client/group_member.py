"""A blocking member of a classic ``consumer`` group: join, sync, heartbeat, commit, leave.

Theory of operation (Kafka's ``ConsumerCoordinator`` cut down to one subscriber):

1. The coordinator is the broker FindCoordinator (key type 0) names for the group; an
   answer of COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS
   sends the member to look it up again and retry.
2. ``join`` runs JoinGroup (v5: a first join without a member id is answered
   MEMBER_ID_REQUIRED with the id to join with, KIP-394) and SyncGroup until the group is
   Stable, and returns this member's partitions. The member the coordinator elects leader
   assigns every member's subscribed partitions with ``range_assign`` (protocol ``range``)
   from the partition counts Metadata gives it; the others send no assignments.
3. Between fetches the caller runs ``maybe_heartbeat(now_ms)``, which sends a Heartbeat
   once ``heartbeat_interval_ms`` passed. False means the generation ended (a rebalance
   began, or this member was fenced or forgotten): the caller commits what it consumed
   (the coordinator still takes commits of the generation that is rebalancing) and calls
   ``join`` again. There is no heartbeat thread, so the time between calls must stay well
   under ``session_timeout_ms``.
4. ``committed`` (OffsetFetch v7) gives the group's committed offsets, ``commit``
   (OffsetCommit v7, with the generation and member id) stores new ones, and ``leave``
   (LeaveGroup v3) ends the membership at once instead of after the session timeout.

Errors the member cannot recover from (GROUP_AUTHORIZATION_FAILED, INVALID_SESSION_TIMEOUT,
INCONSISTENT_GROUP_PROTOCOL, ...) raise ``BrokerError``; time is passed in as ``now_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kio.index import load_request_schema

from tidelog.client.blocking import BlockingClient
from tidelog.client.consumer_protocol import (
    PROTOCOL_TYPE,
    RANGE,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from tidelog.client.errors import BrokerError, ClientConnectionError
from tidelog.client.transactions import COORDINATOR_GROUP
from tidelog.client.wire import error_code
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.apis import ApiKey
from tidelog.protocol.messages import build

_VERSIONS: Final = {
    ApiKey.JOIN_GROUP: 5,
    ApiKey.SYNC_GROUP: 3,
    ApiKey.HEARTBEAT: 3,
    ApiKey.LEAVE_GROUP: 3,
    ApiKey.OFFSET_COMMIT: 7,
    ApiKey.OFFSET_FETCH: 7,
}
#: Answers after which the coordinator is looked up again (rule 1).
COORDINATOR_ERRORS: Final = frozenset(
    {
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)
#: Answers that end this member's generation: join again (rule 3).
REJOIN_ERRORS: Final = frozenset(
    {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID}
)
_MAX_JOIN_ATTEMPTS: Final = 50


class GroupMember:
    """One member of ``group_id`` subscribed to ``topics``; see the module docstring."""

    def __init__(
        self,
        client: BlockingClient,
        group_id: str,
        topics: Sequence[str],
        *,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        heartbeat_interval_ms: int = 3_000,
    ) -> None:
        self.client = client
        self.group_id = group_id
        self.topics = tuple(topics)
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.member_id = ""
        self.generation_id = -1
        self.coordinator: int | None = None
        self.assignment: tuple[TopicPartition, ...] = ()
        self._last_heartbeat_ms = 0

    @property
    def in_generation(self) -> bool:
        return self.generation_id >= 0 and bool(self.member_id)

    def _send(self, api: ApiKey, data: Mapping[str, Any], timeout_s: float | None = None) -> Any:
        """``api``'s request to the coordinator (looked up first when unknown)."""
        if self.coordinator is None:
            found = self.client.find_coordinator(self.group_id, key_type=COORDINATOR_GROUP)
            if found.error_code in COORDINATOR_ERRORS:
                return None
            if found.error_code != ErrorCode.NONE:
                raise BrokerError(found.error_code, f"group '{self.group_id}'")
            self.coordinator = found.node_id
        request = build(load_request_schema(api, _VERSIONS[api]), data)
        try:
            return self.client.send(request, node_id=self.coordinator, timeout_s=timeout_s)
        except ClientConnectionError:
            self.coordinator = None
            return None

    def _coordinator_failed(self, response: Any, code: ErrorCode) -> bool:
        """Whether there was no answer or the coordinator moved (rule 1)."""
        if response is None or code in COORDINATOR_ERRORS:
            self.coordinator = None
            time.sleep(0.2)
            return True
        return False

    def _reset(self) -> None:
        self.member_id = ""
        self.generation_id = -1

    # joining (rule 2)

    def join(self) -> tuple[TopicPartition, ...]:
        """Join (or rejoin) the group and wait until it is Stable; this member's partitions."""
        self.generation_id = -1
        for _ in range(_MAX_JOIN_ATTEMPTS):
            joined = self._join_group()
            if joined is None:
                continue
            assignment = self._sync_group(joined)
            if assignment is not None:
                self.assignment = assignment
                self._last_heartbeat_ms = int(time.monotonic() * 1000)
                return assignment
        raise BrokerError(
            ErrorCode.REBALANCE_IN_PROGRESS,
            f"group '{self.group_id}' did not settle after {_MAX_JOIN_ATTEMPTS} joins",
        )

    def _join_group(self) -> Any:
        """One JoinGroup; its answer, or None to try again."""
        response = self._send(
            ApiKey.JOIN_GROUP,
            {
                "group_id": self.group_id,
                "session_timeout": self.session_timeout_ms,
                "rebalance_timeout": self.rebalance_timeout_ms,
                "member_id": self.member_id,
                "protocol_type": PROTOCOL_TYPE,
                "protocols": [{"name": RANGE, "metadata": encode_subscription(self.topics)}],
            },
            timeout_s=self.rebalance_timeout_ms / 1000 + 10,
        )
        code = ErrorCode.NONE if response is None else error_code(response.error_code)
        if self._coordinator_failed(response, code):
            return None
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = str(response.member_id)
            return None
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self._reset()
            return None
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return None
        if code != ErrorCode.NONE:
            raise BrokerError(code, f"joining group '{self.group_id}'")
        self.member_id = str(response.member_id)
        self.generation_id = int(response.generation_id)
        return response

    def _sync_group(self, joined: Any) -> tuple[TopicPartition, ...] | None:
        """SyncGroup for the generation ``joined`` began (assigning it when this member
        leads); this member's partitions, or None to join again."""
        assignments = []
        if str(joined.leader) == self.member_id:
            subscriptions = {
                str(m.member_id): decode_subscription(bytes(m.metadata)) for m in joined.members
            }
            assigned = range_assign(subscriptions, self._partition_counts(subscriptions))
            assignments = [
                {"member_id": m, "assignment": encode_assignment(tps)}
                for m, tps in assigned.items()
            ]
        response = self._send(
            ApiKey.SYNC_GROUP,
            {
                "group_id": self.group_id,
                "generation_id": self.generation_id,
                "member_id": self.member_id,
                "assignments": assignments,
            },
            timeout_s=self.rebalance_timeout_ms / 1000 + 10,
        )
        code = ErrorCode.NONE if response is None else error_code(response.error_code)
        if self._coordinator_failed(response, code):
            return None
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self._reset()
            return None
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return None
        if code != ErrorCode.NONE:
            raise BrokerError(code, f"syncing group '{self.group_id}'")
        return decode_assignment(bytes(response.assignment))

    def _partition_counts(self, subscriptions: Mapping[str, Sequence[str]]) -> dict[str, int]:
        topics = sorted({t for ts in subscriptions.values() for t in ts})
        cluster = self.client.metadata(topics)
        return {
            name: len(t.partitions)
            for name, t in cluster.topics.items()
            if name in topics and t.error_code == ErrorCode.NONE and t.partitions
        }

    # staying in the group (rule 3)

    def maybe_heartbeat(self, now_ms: int) -> bool:
        """Send a Heartbeat when one is due; False when the generation ended (join again)."""
        if not self.in_generation:
            return False
        if now_ms - self._last_heartbeat_ms < self.heartbeat_interval_ms:
            return True
        response = self._send(
            ApiKey.HEARTBEAT,
            {
                "group_id": self.group_id,
                "generation_id": self.generation_id,
                "member_id": self.member_id,
            },
        )
        code = ErrorCode.NONE if response is None else error_code(response.error_code)
        if self._coordinator_failed(response, code):
            return True  # heartbeat again next time, at the coordinator found then
        self._last_heartbeat_ms = now_ms
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self._reset()
            return False
        if code in REJOIN_ERRORS:
            return False
        if code != ErrorCode.NONE:
            raise BrokerError(code, f"heartbeat to group '{self.group_id}'")
        return True

    # offsets (rule 4)

    def committed(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``tps`` (those without one are left out)."""
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        data = {
            "group_id": self.group_id,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
            "require_stable": True,
        }
        for _ in range(_MAX_JOIN_ATTEMPTS):
            response = self._send(ApiKey.OFFSET_FETCH, data)
            code = ErrorCode.NONE if response is None else error_code(response.error_code)
            if self._coordinator_failed(response, code):
                continue
            if code != ErrorCode.NONE:
                raise BrokerError(code, f"offsets of group '{self.group_id}'")
            out = _committed_offsets(response)
            if out is not None:
                return out
            time.sleep(0.2)
        raise BrokerError(ErrorCode.UNSTABLE_OFFSET_COMMIT, f"group '{self.group_id}'")

    def commit(self, offsets: Mapping[TopicPartition, int]) -> ErrorCode:
        """Commit ``offsets`` (the next offset to read, per partition) for this generation;
        the first error the coordinator answered, or NONE."""
        if not offsets:
            return ErrorCode.NONE
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, offset in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "committed_offset": offset}
            )
        response = self._send(
            ApiKey.OFFSET_COMMIT,
            {
                "group_id": self.group_id,
                "generation_id_or_member_epoch": self.generation_id,
                "member_id": self.member_id,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            },
        )
        if response is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        for t in response.topics:
            for p in t.partitions:
                code = error_code(p.error_code)
                if code in COORDINATOR_ERRORS:
                    self.coordinator = None
                if code != ErrorCode.NONE:
                    return code
        return ErrorCode.NONE

    def leave(self) -> None:
        """LeaveGroup: the coordinator rebalances the others at once. Errors are ignored
        (the session timeout ends the membership anyway)."""
        if self.member_id and self.coordinator is not None:
            self._send(
                ApiKey.LEAVE_GROUP,
                {"group_id": self.group_id, "members": [{"member_id": self.member_id}]},
            )
        self._reset()


def _committed_offsets(response: Any) -> dict[TopicPartition, int] | None:
    """The committed offsets in an OffsetFetch answer; None when a transaction holds one
    (UNSTABLE_OFFSET_COMMIT: ask again)."""
    out = {}
    for t in response.topics:
        for p in t.partitions:
            code = error_code(p.error_code)
            if code == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                return None
            if code != ErrorCode.NONE:
                raise BrokerError(code, f"offset of {t.name}-{p.partition_index}")
            if int(p.committed_offset) >= 0:
                out[TopicPartition(str(t.name), int(p.partition_index))] = int(p.committed_offset)
    return out
