"""Incremental fetch sessions, the broker's side (KIP-227; Kafka's FetchSession.scala:
``FetchSessionCache`` and ``FetchManager.newContext``).

A session remembers, per client, the partitions it fetches and what it was last told of each,
so that an incremental Fetch lists only what changed on the client's side and its answer
carries only what changed on ours. Rules, by (session_id, session_epoch) of the request:

1. epoch -1 (FINAL): a sessionless full fetch; a non-zero id closes that session first.
2. epoch 0 (INITIAL): a full fetch asking for a new session (a non-zero id closes that one
   first). Its answer creates the session when it lists partitions and a slot is free or
   one can be evicted (rule 6), with every partition cached as answered; else the answer
   says session_id 0.
3. id != 0, epoch > 0: an incremental fetch. An unknown id is FETCH_SESSION_ID_NOT_FOUND,
   an epoch other than the session's is INVALID_FETCH_SESSION_EPOCH, a session created with
   topic ids (Fetch v13+) asked below v13 or the reverse is FETCH_SESSION_TOPIC_ID_ERROR:
   each a top-level error with no partitions. Else the request's partitions are added or
   updated, its forgotten partitions removed, and the session's epoch advances (wrapping
   from 2^31-1 to 1). A session left empty is closed and the fetch answered sessionless.
4. An incremental fetch reads every partition of the session but the parked ones (rule 7),
   so a fetch parked in the purgatory wakes on an append to any of them, and its answer
   holds only the partitions with
   news for the client: records, an error, or a high watermark, last stable offset or log
   start offset other than the last one answered, or a preferred read replica (KIP-392)
   (Kafka's ``CachedPartition.maybeUpdateResponseData``).
   A partition answered with an error caches high watermark -1, so it is answered again
   when the error clears; one answered with records moves to the end of the session, so a
   response's byte budget reaches the others next time.
5. ``max.incremental.fetch.session.cache.slots`` bounds the sessions;
   ``min.incremental.fetch.session.eviction.ms`` is how long a session is safe from being
   evicted by a newcomer.
6. Eviction (Kafka's ``FetchSessionCache.tryEvict``): a full cache first evicts its least
   recently used session if that one is unused for longer than the eviction time. Else the
   lowest-ranked evictable session, by (privileged, size), goes if the newcomer ranks higher:
   any consumer session by a follower's (privileged) one, and a follower's or consumer's
   session older than the eviction time by anyone. Else no session is created.
7. A follower's quiet partitions are parked (``park``): one its request does not list and
   that has nothing to read or learn leaves the partitions a fetch walks. A change to it
   (an append, a high watermark or ISR move, a new leader epoch, it leaving the broker:
   whatever the fetch purgatory is told of) wakes it (``changed``): it is back among the
   partitions read, and in the ``woken`` list of the fetch parked meanwhile. A listed one,
   a forgotten one and a closed session's are unparked at once. Every
   ``PARKED_RECHECK_MS`` a session's parked partitions are all woken to be tested again,
   so a change nobody was told of (a log start moved by retention) is answered within
   that time. An idle follower's fetch so costs nothing per parked partition.

Nothing here reads a clock: time enters as ``now_ms``.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

#: The session id of a fetch without a session (KIP-227 ``INVALID_SESSION_ID``).
INVALID_SESSION_ID: Final = 0
#: Epoch of a full fetch asking for a new session, and of one closing any session.
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
_MAX_EPOCH: Final = 0x7FFFFFFF

#: A partition's key in a session: (topic id from Fetch v13, else topic name; partition).
SessionKey = tuple[uuid.UUID | str, int]

#: Rule 7: how long a session's parked partitions stay parked without a change.
PARKED_RECHECK_MS: Final = 10_000


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's ``FetchMetadata.nextEpoch``)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class SessionPartition:
    """One partition of a fetch or a session: what the client asks (updated by its requests)
    and what it was last answered (updated by the answers, rule 4)."""

    #: The topic's name; None for a topic id this broker does not know.
    topic: str | None
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    #: The partition under its topic's name, kept by whoever resolves the name.
    tp: TopicPartition | None = None
    #: A follower's own log start offset, as its request says (KIP-392's selection).
    replica_log_start_offset: int = -1

    def key(self, uses_topic_ids: bool) -> SessionKey:
        topic: uuid.UUID | str | None = self.topic_id if uses_topic_ids else self.topic
        return (topic if topic is not None else "", self.partition)


@dataclass(frozen=True, slots=True)
class PartitionNews:
    """What an answer tells the client of one partition (the part sessions compare)."""

    error: int
    records_size: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    #: KIP-392: the replica the client is sent to (-1 none); always news.
    preferred_read_replica: int = -1


@dataclass(slots=True)
class FetchSession:
    """One client's session (Kafka's ``FetchSession``)."""

    id: int
    #: A follower's session (Kafka's ``privileged``): ranks above consumers' (rule 6).
    privileged: bool
    uses_topic_ids: bool
    creation_ms: int
    last_used_ms: int
    #: The epoch the next incremental request must carry.
    epoch: int = 1
    #: The partitions each fetch walks: all but the parked ones.
    partitions: dict[SessionKey, SessionPartition] = field(default_factory=dict)
    #: Rule 7: a follower's partitions parked quiet, and the follower.
    parked: dict[SessionKey, SessionPartition] = field(default_factory=dict)
    replica_id: int = -1
    #: Rule 7: parked partitions woken since the session's last fetch began.
    woken: list[SessionPartition] = field(default_factory=list)
    #: Rule 7: when the parked partitions are all woken to be tested again.
    recheck_ms: int = 0

    @property
    def size(self) -> int:
        return len(self.partitions) + len(self.parked)

    @property
    def wake_key(self) -> tuple[str, int]:
        """The key a fetch parked in this session is watched under for woken partitions."""
        return ("fetch-session", self.id)


@dataclass(slots=True)
class FetchContext:
    """How one Fetch is served (Kafka's ``FetchContext``): the partitions to read, and the
    answer's session and partitions once read (``respond``)."""

    #: A top-level error: answered with no partitions and session id 0 (rule 3).
    error: ErrorCode = ErrorCode.NONE
    #: The partitions to read, in order: the request's, or the whole session's.
    partitions: list[SessionPartition] = field(default_factory=list)
    #: The session continued by this fetch (incremental), else None.
    session: FetchSession | None = None
    #: An incremental fetch: the session's partitions its request listed.
    asked: list[SessionPartition] = field(default_factory=list)
    #: A full fetch that asks for a session (epoch 0).
    wants_session: bool = False
    privileged: bool = False
    uses_topic_ids: bool = False


class FetchSessionCache:
    """The sessions of one broker (Kafka's ``FetchSessionCache`` and ``FetchManager``)."""

    def __init__(self, max_slots: int, eviction_ms: int, rng: random.Random | None = None) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._rng = rng if rng is not None else random.Random()
        #: Sessions by id, least recently used first (``touch`` moves one to the end).
        self._sessions: dict[int, FetchSession] = {}
        #: Sessions evicted to make room (Kafka's IncrementalFetchSessionEvictionsPerSec).
        self.evictions = 0
        #: Rule 7: the sessions each partition is parked in, and its key there.
        self._parked: dict[TopicPartition, dict[int, tuple[FetchSession, SessionKey]]] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def num_partitions(self) -> int:
        """Partitions cached over all sessions (Kafka's NumIncrementalFetchPartitionsCached)."""
        return sum(s.size for s in self._sessions.values())

    @property
    def num_parked(self) -> int:
        """Partitions parked over all sessions (rule 7)."""
        return sum(len(s.parked) for s in self._sessions.values())

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._unpark_all(session)
        return session

    # --- rule 7: parked partitions --------------------------------------------------------

    def park(
        self, session: FetchSession, part: SessionPartition, replica_id: int, now_ms: int
    ) -> None:
        """Park ``part`` (resolved: ``part.tp`` set), quiet for follower ``replica_id``."""
        tp = part.tp
        assert tp is not None, "a parked partition is resolved"
        key = part.key(session.uses_topic_ids)
        if session.partitions.pop(key, None) is None:
            return
        if not session.parked:
            session.recheck_ms = now_ms + PARKED_RECHECK_MS
        session.parked[key] = part
        session.replica_id = replica_id
        self._parked.setdefault(tp, {})[session.id] = (session, key)

    def changed(self, tp: TopicPartition) -> list[tuple[FetchSession, SessionPartition]]:
        """Wake every session's parked ``tp`` (it changed): back among the partitions read
        and in the session's ``woken``. Returns the sessions and partitions woken."""
        entries = self._parked.pop(tp, None)
        if not entries:
            return []
        woken: list[tuple[FetchSession, SessionPartition]] = []
        for session, key in entries.values():
            part = session.parked.pop(key, None)
            if part is None:
                continue
            session.partitions[key] = part
            session.woken.append(part)
            woken.append((session, part))
        return woken

    def _unpark(self, session: FetchSession, key: SessionKey) -> SessionPartition | None:
        part = session.parked.pop(key, None)
        if part is None:
            return None
        assert part.tp is not None
        entries = self._parked.get(part.tp)
        if entries is not None:
            entries.pop(session.id, None)
            if not entries:
                del self._parked[part.tp]
        return part

    def _unpark_all(self, session: FetchSession) -> None:
        for key in list(session.parked):
            part = self._unpark(session, key)
            if part is not None:
                session.partitions[key] = part

    def new_context(  # noqa: PLR0917
        self,
        session_id: int,
        epoch: int,
        uses_topic_ids: bool,
        privileged: bool,
        requested: Sequence[SessionPartition],
        forgotten: Iterable[SessionKey],
        now_ms: int,
    ) -> FetchContext:
        """Rules 1-3: how to serve a Fetch with these session fields."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            return FetchContext(
                partitions=list(requested),
                wants_session=epoch == INITIAL_EPOCH,
                privileged=privileged,
                uses_topic_ids=uses_topic_ids,
            )
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        cached = session.partitions
        asked = self._update(session, requested, forgotten, now_ms)
        if not cached and not session.parked:
            self.remove(session_id)
            return FetchContext(partitions=[], uses_topic_ids=uses_topic_ids)
        self._touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return FetchContext(
            partitions=list(cached.values()),
            session=session,
            asked=asked,
            privileged=privileged,
            uses_topic_ids=uses_topic_ids,
        )

    def _update(
        self,
        session: FetchSession,
        requested: Sequence[SessionPartition],
        forgotten: Iterable[SessionKey],
        now_ms: int,
    ) -> list[SessionPartition]:
        """Rule 3's update of ``session`` by an incremental request (rule 7: a listed or
        forgotten partition is unparked, all are at the recheck); returns the session's
        partitions the request listed."""
        cached = session.partitions
        session.woken.clear()
        if session.parked and now_ms >= session.recheck_ms:
            self._unpark_all(session)
        asked: list[SessionPartition] = []
        for part in requested:
            key = part.key(session.uses_topic_ids)
            old = cached.get(key)
            if old is None:
                old = self._unpark(session, key)
                if old is not None:
                    cached[key] = old
            if old is None:
                cached[key] = part
                asked.append(part)
            else:
                old.fetch_offset = part.fetch_offset
                old.max_bytes = part.max_bytes
                old.current_leader_epoch = part.current_leader_epoch
                old.replica_log_start_offset = part.replica_log_start_offset
                asked.append(old)
        for key in forgotten:
            cached.pop(key, None)
            self._unpark(session, key)
        return asked

    def respond(
        self, context: FetchContext, news: Sequence[PartitionNews | None], now_ms: int
    ) -> tuple[int, list[int]]:
        """Rules 2 and 4, once ``context.partitions`` are read (``news`` in their order): the
        answer's session id and the indexes of the partitions it carries. In an incremental
        fetch, None is a partition left unread with nothing new (a follower's quiet one),
        so not answered and its cached state kept."""
        if context.session is not None:
            return context.session.id, self._incremental_answer(context, news)
        everything = list(range(len(news)))
        if not context.wants_session or not context.partitions:
            return INVALID_SESSION_ID, everything
        for part, item in zip(context.partitions, news, strict=True):
            assert item is not None, "a full fetch reads every partition"
            _remember(part, item)
        session_id = self._maybe_create(context, now_ms)
        return session_id, everything

    def _incremental_answer(
        self, context: FetchContext, news: Sequence[PartitionNews | None]
    ) -> list[int]:
        session = context.session
        assert session is not None
        chosen: list[int] = []
        moved: list[SessionPartition] = []
        for i, (part, item) in enumerate(zip(context.partitions, news, strict=True)):
            if item is None:
                continue
            if _has_news(part, item):
                chosen.append(i)
                if item.records_size > 0:
                    moved.append(part)
            _remember(part, item)
        cached = session.partitions
        for part in moved:
            key = part.key(session.uses_topic_ids)
            if cached.get(key) is part:
                cached[key] = cached.pop(key)
        return chosen

    def _maybe_create(self, context: FetchContext, now_ms: int) -> int:
        """Rule 6: a new session for ``context`` if there is room, else 0."""
        size = len(context.partitions)
        if len(self._sessions) >= self.max_slots and not self._try_evict(
            context.privileged, size, now_ms
        ):
            return INVALID_SESSION_ID
        session_id = self._new_id()
        session = FetchSession(
            id=session_id,
            privileged=context.privileged,
            uses_topic_ids=context.uses_topic_ids,
            creation_ms=now_ms,
            last_used_ms=now_ms,
            partitions={p.key(context.uses_topic_ids): p for p in context.partitions},
        )
        self._sessions[session_id] = session
        return session_id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Rule 6: make one slot free, if a session may be evicted for the newcomer."""
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self._evict(oldest)
            return True
        candidates = [
            s
            for s in self._sessions.values()
            if now_ms - s.creation_ms > self.eviction_ms or (privileged and not s.privileged)
        ]
        if not candidates:
            return False
        weakest = min(candidates, key=lambda s: (s.privileged, s.size, s.id))
        # Kafka's EvictableKey order with the newcomer's id 0: it must rank strictly higher.
        if (privileged, size) <= (weakest.privileged, weakest.size):
            return False
        self._evict(weakest)
        return True

    def _evict(self, session: FetchSession) -> None:
        self.remove(session.id)
        self.evictions += 1

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        self._sessions[session.id] = self._sessions.pop(session.id)

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, _MAX_EPOCH)
            if session_id not in self._sessions:
                return session_id


def _has_news(part: SessionPartition, item: PartitionNews) -> bool:
    return (
        item.records_size > 0
        or item.error != ErrorCode.NONE
        or item.high_watermark != part.high_watermark
        or item.last_stable_offset != part.last_stable_offset
        or item.log_start_offset != part.log_start_offset
        or item.preferred_read_replica >= 0
    )


def _remember(part: SessionPartition, item: PartitionNews) -> None:
    """Cache what the client was told of ``part`` (rule 4; -1 after an error)."""
    part.high_watermark = item.high_watermark if item.error == ErrorCode.NONE else -1
    part.last_stable_offset = item.last_stable_offset
    part.log_start_offset = item.log_start_offset


__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "PARKED_RECHECK_MS",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "PartitionNews",
    "SessionKey",
    "SessionPartition",
    "next_epoch",
]
