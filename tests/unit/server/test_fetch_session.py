"""The broker's fetch session cache (KIP-227, ``tidelog.server.replica.fetch_session``):
creation, epochs, session errors, eviction, and what incremental answers carry."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence

import pytest

from tests.unit.server.metrics_fakes import fake_replica_manager, scrape
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition
from tidelog.server.observability.metrics.broker_collector import broker_registry
from tidelog.server.replica.fetch_session import (
    PARKED_RECHECK_MS,
    FetchContext,
    FetchSession,
    FetchSessionCache,
    PartitionNews,
    SessionKey,
    SessionPartition,
    next_epoch,
)

EVICTION_MS = 1_000


def part(topic: str, partition: int, offset: int = 0, epoch: int = 5) -> SessionPartition:
    return SessionPartition(topic, None, partition, offset, 1 << 20, epoch)


def news(
    hw: int, records: int = 0, error: ErrorCode = ErrorCode.NONE, lso: int = -1
) -> PartitionNews:
    return PartitionNews(int(error), records, hw, lso if lso >= 0 else hw, 0)


def cache(slots: int = 10) -> FetchSessionCache:
    return FetchSessionCache(slots, EVICTION_MS, random.Random(7))


def open_session(
    c: FetchSessionCache,
    parts: list[SessionPartition],
    *,
    privileged: bool = False,
    now_ms: int = 0,
    hws: list[int] | None = None,
) -> int:
    """A full fetch with epoch 0 answered; the session id the answer carried."""
    ctx = c.new_context(0, 0, False, privileged, parts, [], now_ms)
    assert ctx.error == ErrorCode.NONE
    session_id, chosen = c.respond(ctx, [news(h) for h in (hws or [10] * len(parts))], now_ms)
    assert chosen == list(range(len(parts)))
    return session_id


def incremental(
    c: FetchSessionCache,
    session_id: int,
    epoch: int,
    *,
    parts: Sequence[SessionPartition] = (),
    forgotten: Sequence[SessionKey] = (),
    now_ms: int = 0,
) -> FetchContext:
    return c.new_context(session_id, epoch, False, False, list(parts), list(forgotten), now_ms)


def test_full_fetch_with_epoch_zero_creates_a_session() -> None:
    c = cache()
    session_id = open_session(c, [part("t", 0), part("t", 1)])
    assert session_id != 0
    assert len(c) == 1
    assert c.num_partitions == 2
    session = c.get(session_id)
    assert session is not None
    assert session.epoch == 1


def test_sessionless_full_fetch_creates_nothing_and_closes_the_named_session() -> None:
    c = cache()
    ctx = c.new_context(0, -1, False, False, [part("t", 0)], [], 0)
    assert c.respond(ctx, [news(10)], 0) == (0, [0])
    assert len(c) == 0
    session_id = open_session(c, [part("t", 0)])
    ctx = c.new_context(session_id, -1, False, False, [part("t", 0)], [], 0)
    assert c.respond(ctx, [news(10)], 0) == (0, [0])
    assert c.get(session_id) is None


def test_full_fetch_with_epoch_zero_and_an_id_replaces_that_session() -> None:
    c = cache()
    old = open_session(c, [part("t", 0)])
    ctx = c.new_context(old, 0, False, False, [part("t", 0)], [], 0)
    new, _ = c.respond(ctx, [news(10)], 0)
    assert c.get(old) is None
    assert new not in (0, old)
    assert len(c) == 1


@pytest.mark.parametrize(
    ("session_id", "epoch", "error"),
    [
        (12345, 1, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
        (0, 3, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
        (None, 2, ErrorCode.INVALID_FETCH_SESSION_EPOCH),
        (None, 7, ErrorCode.INVALID_FETCH_SESSION_EPOCH),
    ],
)
def test_unknown_session_and_wrong_epoch_are_top_level_errors(
    session_id: int | None, epoch: int, error: ErrorCode
) -> None:
    c = cache()
    opened = open_session(c, [part("t", 0)])
    ctx = incremental(c, opened if session_id is None else session_id, epoch)
    assert ctx.error == error
    assert ctx.partitions == []
    # The session itself is untouched: the right epoch still works.
    assert incremental(c, opened, 1).error == ErrorCode.NONE


def test_topic_id_sessions_refuse_name_requests_and_the_reverse() -> None:
    c = cache()
    topic_id = uuid.uuid4()
    ctx = c.new_context(0, 0, True, False, [SessionPartition(None, topic_id, 0, 0, 100)], [], 0)
    session_id, _ = c.respond(ctx, [news(10)], 0)
    named = c.new_context(session_id, 1, False, False, [], [], 0)
    assert named.error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    ctx = c.new_context(0, 0, False, False, [part("t", 0)], [], 0)
    by_name, _ = c.respond(ctx, [news(10)], 0)
    with_ids = c.new_context(by_name, 1, True, False, [], [], 0)
    assert with_ids.error == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR


def test_topic_id_sessions_forget_by_topic_id() -> None:
    c = cache()
    a, b = uuid.uuid4(), uuid.uuid4()
    parts = [SessionPartition(None, a, 0, 0, 100), SessionPartition(None, b, 0, 0, 100)]
    ctx = c.new_context(0, 0, True, False, parts, [], 0)
    session_id, _ = c.respond(ctx, [news(1), news(1)], 0)
    ctx = c.new_context(session_id, 1, True, False, [], [(a, 0)], 0)
    assert [p.topic_id for p in ctx.partitions] == [b]


def test_epochs_advance_and_wrap_to_one() -> None:
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(0x7FFFFFFF) == 1
    assert next_epoch(-1) == -1
    c = cache()
    session_id = open_session(c, [part("t", 0)])
    for epoch in (1, 2, 3):
        assert incremental(c, session_id, epoch).error == ErrorCode.NONE
    assert incremental(c, session_id, 3).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_incremental_fetch_reads_the_whole_session_with_updates_and_forgets() -> None:
    c = cache()
    session_id = open_session(c, [part("t", 0, 100), part("t", 1, 200), part("u", 0, 300)])
    ctx = incremental(
        c, session_id, 1, parts=[part("t", 1, 250), part("v", 0, 7)], forgotten=[("u", 0)]
    )
    assert ctx.error == ErrorCode.NONE
    assert [(p.topic, p.partition, p.fetch_offset) for p in ctx.partitions] == [
        ("t", 0, 100),
        ("t", 1, 250),
        ("v", 0, 7),
    ]
    assert c.num_partitions == 3


def test_an_incremental_fetch_updates_the_follower_log_start_offset() -> None:
    """A follower lists a partition whose log start moved; the session keeps the new one
    (the leader's KIP-392 selection reads it from the follower's fetch)."""
    c = cache()
    session_id = open_session(c, [part("t", 0, 100)], privileged=True)
    moved = part("t", 0, 100)
    moved.replica_log_start_offset = 40
    ctx = incremental(c, session_id, 1, parts=[moved])
    assert [p.replica_log_start_offset for p in ctx.partitions] == [40]


def test_incremental_answer_carries_only_partitions_with_news() -> None:
    c = cache()
    parts = [part("t", i) for i in range(6)]
    session_id = open_session(c, parts, hws=[10] * 6)
    ctx = incremental(c, session_id, 1)
    answers = [
        news(10),  # nothing new
        news(10, records=100),  # records
        news(11),  # high watermark moved
        news(10, error=ErrorCode.NOT_LEADER_OR_FOLLOWER),  # an error
        news(10, lso=9),  # last stable offset moved
        PartitionNews(0, 0, 10, 10, 3),  # log start offset moved
    ]
    session_id_out, chosen = c.respond(ctx, answers, 0)
    assert session_id_out == session_id
    assert chosen == [1, 2, 3, 4, 5]
    # The same state again: only the partition answered with an error comes back (its
    # cached high watermark is -1 after the error), and the moved ones do not.
    ctx = incremental(c, session_id, 2)
    by_partition = {p.partition: p for p in ctx.partitions}
    again = [
        news(10),
        news(10),
        news(11),
        news(10),
        news(10, lso=9),
        PartitionNews(0, 0, 10, 10, 3),
    ]
    _, chosen = c.respond(ctx, [again[p.partition] for p in ctx.partitions], 0)
    assert [ctx.partitions[i].partition for i in chosen] == [3]
    assert by_partition[3].high_watermark == 10


def test_a_preferred_read_replica_is_always_news() -> None:
    """KIP-392: a partition answered with a replica to read from is sent even when nothing
    else changed (Kafka's ``CachedPartition.maybeUpdateResponseData``)."""
    c = cache()
    session_id = open_session(c, [part("t", 0), part("t", 1)], hws=[10, 10])
    ctx = incremental(c, session_id, 1)
    sent = PartitionNews(0, 0, 10, 10, 0, preferred_read_replica=2)
    _, chosen = c.respond(ctx, [news(10), sent], 0)
    assert chosen == [1]


def test_partitions_answered_with_records_move_to_the_end_of_the_session() -> None:
    c = cache()
    session_id = open_session(c, [part("t", 0), part("t", 1), part("t", 2)])
    ctx = incremental(c, session_id, 1)
    c.respond(ctx, [news(10, records=5), news(10), news(10)], 0)
    ctx = incremental(c, session_id, 2)
    assert [p.partition for p in ctx.partitions] == [1, 2, 0]


def test_a_session_left_empty_is_closed_and_answered_sessionless() -> None:
    c = cache()
    session_id = open_session(c, [part("t", 0)])
    ctx = incremental(c, session_id, 1, forgotten=[("t", 0)])
    assert ctx.error == ErrorCode.NONE
    assert ctx.partitions == []
    assert c.respond(ctx, [], 0) == (0, [])
    assert c.get(session_id) is None


def test_full_cache_without_evictable_session_answers_sessionless() -> None:
    c = cache(slots=1)
    first = open_session(c, [part("t", 0), part("t", 1)], now_ms=0)
    assert open_session(c, [part("u", 0), part("u", 1), part("u", 2)], now_ms=10) == 0
    assert c.get(first) is not None
    assert c.evictions == 0


def test_a_stale_session_is_evicted_first() -> None:
    c = cache(slots=2)
    stale = open_session(c, [part("t", 0)], now_ms=0)
    busy = open_session(c, [part("u", i) for i in range(5)], privileged=True, now_ms=0)
    incremental(c, busy, 1, now_ms=EVICTION_MS + 50)  # touched: not stale
    new = open_session(c, [part("v", 0)], now_ms=EVICTION_MS + 100)
    assert new != 0
    assert c.get(stale) is None
    assert c.get(busy) is not None
    assert c.evictions == 1


def test_a_follower_session_evicts_a_young_consumer_session() -> None:
    c = cache(slots=1)
    consumer = open_session(c, [part("t", i) for i in range(50)], now_ms=0)
    follower = open_session(c, [part("u", 0)], privileged=True, now_ms=10)
    assert follower != 0
    assert c.get(consumer) is None


def test_a_consumer_never_evicts_a_young_session() -> None:
    c = cache(slots=1)
    young = open_session(c, [part("t", 0)], now_ms=0)
    assert open_session(c, [part("u", i) for i in range(9)], now_ms=10) == 0
    assert c.get(young) is not None


def test_a_larger_session_evicts_an_old_smaller_one_of_the_same_rank() -> None:
    c = cache(slots=1)
    old = open_session(c, [part("t", 0)], now_ms=0)
    # Used recently (not stale) but created longer ago than the eviction time.
    incremental(c, old, 1, now_ms=EVICTION_MS - 10)
    now = EVICTION_MS + 10
    assert open_session(c, [part("u", 0)], now_ms=now) == 0  # same size: not higher
    larger = open_session(c, [part("u", 0), part("u", 1)], now_ms=now)
    assert larger != 0
    assert c.get(old) is None


def test_a_consumer_does_not_evict_an_old_follower_session() -> None:
    c = cache(slots=1)
    follower = open_session(c, [part("t", 0)], privileged=True, now_ms=0)
    incremental(c, follower, 1, now_ms=EVICTION_MS - 10)
    now = EVICTION_MS + 10
    assert open_session(c, [part("u", i) for i in range(20)], now_ms=now) == 0
    assert c.get(follower) is not None


def test_zero_slots_means_no_sessions() -> None:
    c = cache(slots=0)
    assert open_session(c, [part("t", 0)]) == 0
    assert len(c) == 0


def test_the_cache_gauges_count_sessions_and_their_partitions() -> None:
    rm = fake_replica_manager()
    c: FetchSessionCache = rm.fetch_sessions
    open_session(c, [part("t", 0), part("t", 1)])
    open_session(c, [part("u", 0)], privileged=True)
    got = scrape(broker_registry(rm, process=False))  # type: ignore[arg-type]
    assert got["kafka_server_fetchsessioncache_numincrementalfetchsessions"] == 2
    assert got["kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"] == 3


# --- rule 7: a follower's parked partitions ----------------------------------------------


def parked_session(c: FetchSessionCache) -> tuple[FetchSession, list[SessionPartition]]:
    """A follower's session over t-0..t-2, each resolved; t-1 and t-2 parked at time 0."""
    parts = [part("t", i, 10) for i in range(3)]
    session_id = open_session(c, parts, privileged=True)
    session = c.get(session_id)
    assert session is not None
    ctx = incremental(c, session_id, 1)
    for p in ctx.partitions:
        p.tp = TopicPartition("t", p.partition)
    for p in ctx.partitions[1:]:
        c.park(session, p, replica_id=2, now_ms=0)
    return session, ctx.partitions


def test_parked_partitions_are_left_out_of_the_fetches_until_they_change() -> None:
    c = cache()
    session, _parts = parked_session(c)
    assert (session.replica_id, c.num_partitions, c.num_parked) == (2, 3, 2)
    ctx = incremental(c, session.id, 2)
    assert [p.partition for p in ctx.partitions] == [0]
    woken = c.changed(TopicPartition("t", 2))
    assert [(s.id, p.partition) for s, p in woken] == [(session.id, 2)]
    assert [p.partition for p in session.woken] == [2]
    assert c.changed(TopicPartition("t", 2)) == []  # woken once
    assert c.changed(TopicPartition("t", 0)) == []  # never parked
    ctx = incremental(c, session.id, 3)
    assert [p.partition for p in ctx.partitions] == [0, 2]
    assert session.woken == []  # a new fetch starts with nothing woken
    assert c.num_parked == 1


def test_a_listed_parked_partition_is_read_at_its_new_offset_and_a_forgotten_one_dropped() -> None:
    c = cache()
    session, parts = parked_session(c)
    ctx = incremental(c, session.id, 2, parts=[part("t", 1, 11)], forgotten=[("t", 2)])
    assert [(p.partition, p.fetch_offset) for p in ctx.partitions] == [(0, 10), (1, 11)]
    assert ctx.partitions[1] is parts[1]  # the session's own entry, updated
    assert c.num_parked == 0
    assert c.changed(TopicPartition("t", 2)) == []  # forgotten: no longer woken
    assert c.num_partitions == 2


def test_parked_partitions_are_all_tested_again_after_the_recheck_time() -> None:
    c = cache()
    session, _parts = parked_session(c)
    ctx = incremental(c, session.id, 2, now_ms=PARKED_RECHECK_MS - 1)
    assert [p.partition for p in ctx.partitions] == [0]
    ctx = incremental(c, session.id, 3, now_ms=PARKED_RECHECK_MS)
    assert [p.partition for p in ctx.partitions] == [0, 1, 2]
    assert c.num_parked == 0


def test_a_session_whose_partitions_are_all_parked_stays_open() -> None:
    c = cache()
    session, parts = parked_session(c)
    c.park(session, parts[0], replica_id=2, now_ms=0)
    ctx = incremental(c, session.id, 2)
    assert (ctx.error, ctx.session, ctx.partitions) == (ErrorCode.NONE, session, [])
    assert len(c) == 1


@pytest.mark.parametrize("how", ["removed", "evicted", "replaced"])
def test_a_closed_session_leaves_no_parked_partition_behind(how: str) -> None:
    c = cache(slots=1)
    session, _parts = parked_session(c)
    if how == "removed":
        c.remove(session.id)
    elif how == "evicted":
        # Unused for longer than the eviction time: a newcomer evicts it (rule 6).
        open_session(c, [part("u", 0)], now_ms=EVICTION_MS + 1)
        assert c.evictions == 1
    else:
        c.new_context(session.id, 0, False, True, [part("t", 0)], [], 0)
    assert c.get(session.id) is None
    assert c.num_parked == 0
    assert c.changed(TopicPartition("t", 1)) == []
