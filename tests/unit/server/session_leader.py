"""A leader's side of a follower fetcher's Fetch in a KIP-227 session, for unit tests: it
keeps the session's partitions as the request says (full: replaced; incremental: listed ones
added or updated, forgotten ones removed) and answers the session's partitions with
``answer`` (an incremental answer keeps only those with records or an error)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tidelog.client.client import FetchRequestPartition as ClientFetchPartition
from tidelog.client.client import FetchResult as ClientFetchResult
from tidelog.client.fetch_session import FetchSessionHandler, SessionFetchRequest
from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

Answer = Callable[[TopicPartition, ClientFetchPartition], ClientFetchResult]


class SessionLeader:
    """See the module docstring; ``steps`` are the requests as sent."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.session_id = 0
        self.session: dict[TopicPartition, ClientFetchPartition] = {}
        self.steps: list[SessionFetchRequest[ClientFetchPartition]] = []
        #: What the session held after each request.
        self.asked: list[set[TopicPartition]] = []
        #: A top-level error to answer the next request with (once).
        self.fail_next = ErrorCode.NONE

    async def session_fetch(
        self,
        session: FetchSessionHandler[ClientFetchPartition],
        partitions: Mapping[TopicPartition, ClientFetchPartition],
        **_kw: Any,
    ) -> tuple[ErrorCode, dict[TopicPartition, ClientFetchResult]]:
        step = session.build(partitions)
        self.steps.append(step)
        if self.fail_next != ErrorCode.NONE:
            error, self.fail_next = self.fail_next, ErrorCode.NONE
            self.session = {}
            session.handle_response(error, 0, [])
            return error, {}
        if step.full:
            self.session_id += 1
            self.session = dict(step.to_send)
        else:
            assert step.session_id == self.session_id
            self.session.update(step.to_send)
            for tp in step.to_forget:
                del self.session[tp]
        self.asked.append(set(self.session))
        results = {tp: self.answer(tp, request) for tp, request in self.session.items()}
        if not step.full:
            results = {
                tp: r for tp, r in results.items() if r.records or r.error_code != ErrorCode.NONE
            }
        assert session.handle_response(ErrorCode.NONE, self.session_id, results)
        return ErrorCode.NONE, results
