"""The fetching side of KIP-227 (``tidelog.client.fetch_session``): full then incremental
requests, what goes out, and the fall back to a full fetch."""

from __future__ import annotations

import pytest

from tidelog.client.fetch import FetchRequestPartition
from tidelog.client.fetch_session import FetchSessionHandler
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def at(offset: int, epoch: int = 3) -> FetchRequestPartition:
    return FetchRequestPartition(fetch_offset=offset, current_leader_epoch=epoch)


def established(session_id: int = 77) -> FetchSessionHandler[FetchRequestPartition]:
    """A handler whose full fetch of A and B created session ``session_id``."""
    handler: FetchSessionHandler[FetchRequestPartition] = FetchSessionHandler()
    first = handler.build({A: at(0), B: at(0)})
    assert (first.session_id, first.epoch, first.full) == (0, 0, True)
    assert first.to_send == {A: at(0), B: at(0)}
    assert handler.handle_response(ErrorCode.NONE, session_id, [A, B])
    return handler


def test_after_the_full_fetch_an_idle_round_sends_nothing() -> None:
    handler = established()
    step = handler.build({A: at(0), B: at(0)})
    assert (step.session_id, step.epoch, step.full) == (77, 1, False)
    assert step.to_send == {}
    assert step.to_forget == []
    assert handler.handle_response(ErrorCode.NONE, 77, [])
    assert handler.build({A: at(0), B: at(0)}).epoch == 2


def test_incremental_fetch_lists_changed_and_added_and_forgets_removed() -> None:
    handler = established()
    step = handler.build({A: at(5), C: at(9)})
    assert step.to_send == {A: at(5), C: at(9)}
    assert step.to_forget == [B]
    assert handler.handle_response(ErrorCode.NONE, 77, [A])
    # An epoch change is a change too.
    step = handler.build({A: at(5, epoch=4), C: at(9)})
    assert step.to_send == {A: at(5, epoch=4)}
    assert step.to_forget == []


def test_with_the_changed_partitions_named_only_those_are_compared() -> None:
    """A follower's fetcher names what it changed: the same steps as comparing everything,
    and a partition it does not name is taken as unchanged."""
    handler = established()
    step = handler.build({A: at(5), C: at(9)}, changed={A, B, C})
    assert (step.to_send, step.to_forget) == ({A: at(5), C: at(9)}, [B])
    assert handler.handle_response(ErrorCode.NONE, 77, [A])
    step = handler.build({A: at(5), C: at(10)}, changed=set())
    assert (step.to_send, step.to_forget) == ({}, [])
    step = handler.build({A: at(5), C: at(11)}, changed={A, C})
    assert (step.to_send, step.to_forget) == ({C: at(11)}, [])
    full = FetchSessionHandler[FetchRequestPartition]().build({A: at(1)}, changed=set())
    assert (full.full, full.to_send) == (True, {A: at(1)})  # a full fetch sends all


def test_a_partition_left_out_for_a_round_is_forgotten_then_added_back() -> None:
    """Leaving a partition out of ``wanted`` (throttled, paused) forgets it: the leader
    would otherwise go on fetching it as last asked."""
    handler = established()
    step = handler.build({A: at(0)})
    assert step.to_forget == [B]
    handler.handle_response(ErrorCode.NONE, 77, [])
    step = handler.build({A: at(0), B: at(0)})
    assert step.to_send == {B: at(0)}
    assert step.to_forget == []


def test_a_full_answer_with_session_id_zero_keeps_fetching_full() -> None:
    handler: FetchSessionHandler[FetchRequestPartition] = FetchSessionHandler()
    handler.build({A: at(0)})
    assert handler.handle_response(ErrorCode.NONE, 0, [A])
    step = handler.build({A: at(0)})
    assert (step.session_id, step.epoch) == (0, 0)
    assert step.to_send == {A: at(0)}


def test_session_id_not_found_asks_for_a_new_session() -> None:
    handler = established()
    handler.build({A: at(1), B: at(0)})
    assert not handler.handle_response(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
    step = handler.build({A: at(1), B: at(0)})
    assert (step.session_id, step.epoch) == (0, 0)
    assert step.to_send == {A: at(1), B: at(0)}


@pytest.mark.parametrize(
    "error", [ErrorCode.INVALID_FETCH_SESSION_EPOCH, ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR]
)
def test_other_session_errors_close_the_session_with_a_full_fetch(error: ErrorCode) -> None:
    handler = established()
    handler.build({A: at(1), B: at(0)})
    assert not handler.handle_response(error, 0, [])
    step = handler.build({A: at(1), B: at(0)})
    assert (step.session_id, step.epoch, step.full) == (77, 0, True)
    assert step.to_send == {A: at(1), B: at(0)}


def test_a_failed_request_makes_the_next_fetch_full() -> None:
    handler = established()
    handler.build({A: at(1), B: at(0)})
    handler.handle_error()
    step = handler.build({A: at(1), B: at(0)})
    assert (step.session_id, step.epoch) == (77, 0)
    assert step.to_send == {A: at(1), B: at(0)}
    assert handler.handle_response(ErrorCode.NONE, 78, [A, B])
    assert handler.build({A: at(1), B: at(0)}).session_id == 78


def test_answers_that_break_the_session_are_refused() -> None:
    handler = established()
    handler.build({A: at(0), B: at(0)})
    assert not handler.handle_response(ErrorCode.NONE, 77, [C])  # not in the session
    assert handler.build({A: at(0), B: at(0)}).full
    # A full answer missing a partition.
    assert not handler.handle_response(ErrorCode.NONE, 77, [A])
    step = handler.build({A: at(0), B: at(0)})
    assert (step.session_id, step.epoch) == (0, 0)


def test_an_incremental_answer_with_session_id_zero_starts_over() -> None:
    handler = established()
    handler.build({A: at(0), B: at(0)})
    assert handler.handle_response(ErrorCode.NONE, 0, [])
    step = handler.build({A: at(0), B: at(0)})
    assert (step.session_id, step.epoch) == (0, 0)
