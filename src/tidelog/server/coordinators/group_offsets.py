"""Committed-offset APIs: OffsetCommit (8), TxnOffsetCommit (28), OffsetFetch (9) and
OffsetDelete (47) (Kafka's ``handleCommitOffsets``, ``handleTxnCommitOffsets``,
``handleFetchOffsets``, ``handleDeleteOffsets``). Rules 3 and 5 of
``tidelog.server.coordinators.group``: a commit is one batch with acks=all, visible once
replicated; a transaction's offsets are pending until its marker (KIP-98/KIP-447)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from tidelog.coordinator.group import OFFSET_METADATA_MAX_BYTES, GroupManager
from tidelog.coordinator.records import OffsetAndMetadata, offset_key, offset_value
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.protocol.codec import RequestHeader
from tidelog.security.acls import AclOperation, ResourceType
from tidelog.server.auth import authz
from tidelog.server.coordinators.group_common import (
    Append,
    AuthorizerOf,
    Clock,
    Entries,
    Lookup,
    Respond,
    group_refused,
    topics_refused,
)

#: A request's partitions: (topic, partition, the request's partition entry).
_Requested = list[tuple[str, int, Any]]


class OffsetApis:
    """OffsetCommit, TxnOffsetCommit, OffsetFetch and OffsetDelete. ``is_current(p,
    manager)``: the manager is still loaded for partition ``p`` (a commit replicated after
    an unload changes nothing here); ``partition_exists``: the topic partition exists."""

    def __init__(
        self,
        *,
        lookup: Lookup,
        is_current: Callable[[int, GroupManager], bool],
        append: Append,
        partition_exists: Callable[[str, int], bool],
        clock: Clock,
        authorizer: AuthorizerOf,
        respond: Respond,
    ) -> None:
        self._lookup = lookup
        self._is_current = is_current
        self._append = append
        self._partition_exists = partition_exists
        self._clock = clock
        self._authorizer = authorizer
        self._respond = respond

    def _group_refused(self, header: RequestHeader, operation: AclOperation, group_id: str) -> bool:
        return group_refused(self._authorizer(), header, operation, group_id)

    def _topics_refused(
        self, header: RequestHeader, operation: AclOperation, names: list[str]
    ) -> frozenset[str]:
        return topics_refused(self._authorizer(), header, operation, names)

    # --- OffsetCommit (8), TxnOffsetCommit (28) --------------------------------------------

    def handle_offset_commit(self, header: RequestHeader, body: Any) -> Any:
        group_id = str(body.group_id)
        generation = int(
            getattr(body, "generation_id_or_member_epoch", getattr(body, "generation_id", -1))
        )
        # Kafka's handleOffsetCommitRequest: READ on the group (every partition refused),
        # then READ on each topic; with no partition left the coordinator is not asked.
        if self._group_refused(header, AclOperation.READ, group_id):
            denied = ErrorCode.GROUP_AUTHORIZATION_FAILED
            return self._commit(header, body, -1, None, error=denied, producer=None)
        refused = self._topics_refused(
            header, AclOperation.READ, [str(t.name) for t in body.topics]
        )
        if refused and all(str(t.name) in refused for t in body.topics):
            return self._commit(
                header, body, -1, None, error=ErrorCode.NONE, producer=None, refused=refused
            )
        p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
        if manager is not None:
            error = manager.validate_commit(
                group_id,
                generation,
                str(body.member_id or ""),
                getattr(body, "group_instance_id", None),
                self._clock(),
            )
        elif not group_id:
            error = ErrorCode.INVALID_GROUP_ID
        return self._commit(header, body, p, manager, error=error, producer=None, refused=refused)

    def handle_txn_offset_commit(self, header: RequestHeader, body: Any) -> Any:
        """KIP-98: a transaction's offsets, pending until its marker (Kafka's
        ``handleTxnCommitOffsets``: an unknown group is created Empty)."""
        group_id = str(body.group_id)
        producer = (int(body.producer_id), int(body.producer_epoch))
        # Kafka's handleTxnOffsetCommitRequest: WRITE on the transactional id, READ on the
        # group (either refuses every partition), then READ on each topic.
        refused: frozenset[str] = frozenset()
        authorizer = self._authorizer()
        if authorizer is not None:
            denied: ErrorCode | None = None
            if not authz.allowed(
                authorizer,
                AclOperation.WRITE,
                ResourceType.TRANSACTIONAL_ID,
                str(body.transactional_id),
                header.api_key,
            ):
                denied = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            elif self._group_refused(header, AclOperation.READ, group_id):
                denied = ErrorCode.GROUP_AUTHORIZATION_FAILED
            if denied is not None:
                return self._commit(header, body, -1, None, error=denied, producer=producer)
            refused = self._topics_refused(
                header, AclOperation.READ, [str(t.name) for t in body.topics]
            )
            if refused and all(str(t.name) in refused for t in body.topics):
                return self._commit(
                    header, body, -1, None, error=ErrorCode.NONE, producer=producer, refused=refused
                )
        p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
        if manager is not None:
            error = manager.validate_txn_commit(
                group_id,
                int(getattr(body, "generation_id", -1)),
                str(getattr(body, "member_id", "") or ""),
                getattr(body, "group_instance_id", None),
            )
        elif not group_id:
            error = ErrorCode.INVALID_GROUP_ID
        return self._commit(
            header, body, p, manager, error=error, producer=producer, refused=refused
        )

    def _commit(
        self,
        header: RequestHeader,
        body: Any,
        p: int,
        manager: GroupManager | None,
        *,
        error: ErrorCode,
        producer: tuple[int, int] | None,
        refused: frozenset[str] = frozenset(),
    ) -> Any:
        """An (Txn)OffsetCommit past its group checks (``error``): the partitions' checks,
        then one batch with acks=all. The partitions of ``refused`` topics are
        TOPIC_AUTHORIZATION_FAILED whatever else."""
        requested: _Requested = [
            (str(t.name), int(part.partition_index), part)
            for t in body.topics
            for part in t.partitions
        ]

        def response(errors: Mapping[tuple[str, int], ErrorCode]) -> Any:
            topics: dict[str, list[dict[str, Any]]] = {}
            for name, index, _ in requested:
                topics.setdefault(name, []).append(
                    {"partition_index": index, "error_code": errors[(name, index)]}
                )
            return self._respond(
                header,
                {"topics": [{"name": n, "partitions": parts} for n, parts in topics.items()]},
            )

        if error != ErrorCode.NONE or manager is None:
            denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            return response({(n, i): denied if n in refused else error for n, i, _ in requested})
        errors: dict[tuple[str, int], ErrorCode] = {}
        values = self._offsets_to_commit(body, requested, producer, refused, errors)
        if not values:
            return response(errors)
        group_id = str(body.group_id)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def written(code: ErrorCode) -> None:
            for tp in values:
                errors[(tp.topic, tp.partition)] = code
            if not future.done():
                future.set_result(response(errors))

        self._write_offsets(p, manager, group_id, values, producer=producer, written=written)
        return future

    def _offsets_to_commit(
        self,
        body: Any,
        requested: _Requested,
        producer: tuple[int, int] | None,
        refused: frozenset[str],
        errors: dict[tuple[str, int], ErrorCode],
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The partitions' checks: the offsets to commit, the refused partitions' errors
        into ``errors``."""
        now = self._clock()
        values: dict[TopicPartition, OffsetAndMetadata] = {}
        # OffsetCommit v2-v4 ``retention_time_ms``: an explicit expire time (Kafka's
        # expireTimestamp = now + retention; -1, the default, is none).
        retention = getattr(body, "retention_time", None) if producer is None else None
        retention_ms = -1 if retention is None else int(retention / timedelta(milliseconds=1))
        expire_ms = now + retention_ms if retention_ms >= 0 else -1
        for name, index, part in requested:
            if refused and name in refused:
                errors[(name, index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            metadata = part.committed_metadata or ""
            if not self._partition_exists(name, index):
                # Kafka refuses commits for partitions that do not exist.
                errors[(name, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                errors[(name, index)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            values[TopicPartition(name, index)] = OffsetAndMetadata(
                int(part.committed_offset),
                int(getattr(part, "committed_leader_epoch", -1)),
                metadata,
                now,
                expire_ms,
            )
        return values

    def _write_offsets(
        self,
        p: int,
        manager: GroupManager,
        group_id: str,
        values: dict[TopicPartition, OffsetAndMetadata],
        *,
        producer: tuple[int, int] | None,
        written: Callable[[ErrorCode], None],
    ) -> None:
        """One batch with acks=all, then ``written`` with its outcome. Plain offsets become
        visible once replicated; a transaction's (``producer``: id, epoch) are pending from
        the leader's append until ``complete_txn``, and dropped again if the batch is not
        replicated."""
        entries: Entries = [(offset_key(group_id, tp), offset_value(v)) for tp, v in values.items()]
        producer_id, producer_epoch = producer if producer is not None else (-1, -1)
        log_offset, appended = self._append(p, entries, producer_id, producer_epoch)
        if producer is not None and log_offset >= 0:
            manager.add_txn_offsets(group_id, producer_id, values, log_offset)
        elif producer is None and log_offset >= 0:
            manager.prepare_offset_commit(group_id, values)  # not expired while in flight

        def done(f: asyncio.Future[ErrorCode]) -> None:
            code = f.result()
            if self._is_current(p, manager):
                if producer is None and log_offset >= 0:
                    manager.offset_commit_done(group_id, values)
                if producer is None and code == ErrorCode.NONE:
                    manager.apply_offsets(group_id, values, log_offset)
                elif producer is not None and code != ErrorCode.NONE and log_offset >= 0:
                    manager.fail_txn_offsets(group_id, producer_id, log_offset)
            written(code)

        appended.add_done_callback(done)

    # --- OffsetFetch (9) -------------------------------------------------------------------

    def handle_offset_fetch(self, header: RequestHeader, body: Any) -> Any:
        version = header.api_version
        if version >= 8:
            requests = [(str(g.group_id), g.topics) for g in body.groups]
        else:
            requests = [(str(body.group_id), body.topics)]
        # KIP-447: a consumer asking for stable offsets waits out open transactions.
        stable = version >= 7 and bool(getattr(body, "require_stable", False))
        answers = [
            self._fetch_offsets(header, group_id, topics, stable) for group_id, topics in requests
        ]
        if version >= 8:
            return self._respond(header, {"groups": answers})
        answer = answers[0]
        return self._respond(
            header, {"topics": answer["topics"], "error_code": answer["error_code"]}
        )

    def _fetch_offsets(
        self, header: RequestHeader, group_id: str, topics: Any, require_stable: bool
    ) -> dict[str, Any]:
        """One group's OffsetFetch answer. Kafka's fetchOffsets: DESCRIBE on the group (else
        GROUP_AUTHORIZATION_FAILED, nothing looked up); all partitions: those of topics
        without DESCRIBE are left out; named ones: TOPIC_AUTHORIZATION_FAILED, offset -1."""
        version = header.api_version
        manager: GroupManager | None
        if self._group_refused(header, AclOperation.DESCRIBE, group_id):
            manager, error = None, ErrorCode.GROUP_AUTHORIZATION_FAILED
        else:
            _p, manager, error = self._lookup(group_id) if group_id else (-1, None, ErrorCode.NONE)
            if not group_id:
                error = ErrorCode.INVALID_GROUP_ID
        committed = manager.committed(group_id) if manager is not None else {}
        if topics is None:
            wanted = sorted(committed)
            if self._authorizer() is not None and wanted:
                hidden = self._topics_refused(
                    header, AclOperation.DESCRIBE, [tp.topic for tp in wanted]
                )
                wanted = [tp for tp in wanted if tp.topic not in hidden]
            refused: frozenset[str] = frozenset()
        else:
            wanted = [
                TopicPartition(str(t.name), int(i)) for t in topics for i in t.partition_indexes
            ]
            refused = (
                self._topics_refused(header, AclOperation.DESCRIBE, [str(t.name) for t in topics])
                if error == ErrorCode.NONE
                else frozenset()
            )
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp in wanted:
            value = committed.get(tp)
            code = error if version < 2 else ErrorCode.NONE  # v1: no top-level error
            if refused and tp.topic in refused:
                value, code = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif require_stable and manager is not None and manager.has_pending_txn(group_id, tp):
                value, code = None, ErrorCode.UNSTABLE_OFFSET_COMMIT
            by_topic.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": value.offset if value is not None else -1,
                    "committed_leader_epoch": value.leader_epoch if value is not None else -1,
                    "metadata": value.metadata if value is not None else "",
                    "error_code": code,
                }
            )
        if error != ErrorCode.NONE and version >= 2:
            by_topic = {}
        return {
            "group_id": group_id,
            "error_code": error,
            "topics": [{"name": n, "partitions": parts} for n, parts in by_topic.items()],
        }

    # --- OffsetDelete (47) -----------------------------------------------------------------

    def handle_offset_delete(self, header: RequestHeader, body: Any) -> Any:
        group_id = str(body.group_id)
        tps = [
            TopicPartition(str(t.name), int(p.partition_index))
            for t in body.topics
            for p in t.partitions
        ]

        def response(error: ErrorCode, errors: Mapping[TopicPartition, ErrorCode]) -> Any:
            topics: dict[str, list[dict[str, Any]]] = {}
            for tp, e in errors.items():
                topics.setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "error_code": e}
                )
            return self._respond(
                header,
                {
                    "error_code": error,
                    "topics": [{"name": n, "partitions": parts} for n, parts in topics.items()],
                },
            )

        # Kafka's handleOffsetDeleteRequest: DELETE on the group (the error alone), then
        # READ on each topic (its partitions TOPIC_AUTHORIZATION_FAILED).
        if self._group_refused(header, AclOperation.DELETE, group_id):
            return response(ErrorCode.GROUP_AUTHORIZATION_FAILED, {})
        refused = self._topics_refused(
            header, AclOperation.READ, [str(t.name) for t in body.topics]
        )
        p, manager, error = (
            self._lookup(group_id) if group_id else (-1, None, ErrorCode.INVALID_GROUP_ID)
        )
        if manager is None:
            return response(error, {})
        error, errors = manager.offset_delete_check(
            group_id, [tp for tp in tps if tp.topic not in refused] if refused else tps
        )
        if refused and error == ErrorCode.NONE:
            checked = errors
            errors = {
                tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp.topic in refused else checked[tp]
                for tp in tps
            }
        deletable = [tp for tp, e in errors.items() if e == ErrorCode.NONE]
        if error != ErrorCode.NONE or not deletable:
            return response(error, errors)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        log_offset, appended = self._append(
            p, [(offset_key(group_id, tp), None) for tp in deletable]
        )

        def written(f: asyncio.Future[ErrorCode]) -> None:
            code = f.result()
            if code == ErrorCode.NONE:
                manager.apply_offsets(group_id, dict.fromkeys(deletable), log_offset)
            else:
                for tp in deletable:
                    errors[tp] = code
            if not future.done():
                future.set_result(response(ErrorCode.NONE, errors))

        appended.add_done_callback(written)
        return future


__all__ = ["OffsetApis"]
