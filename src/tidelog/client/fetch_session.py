"""Incremental fetch sessions, the fetching side (KIP-227; Kafka's FetchSessionHandler).

One handler per broker fetched from. Rules:

1. The first fetch, and the one after any failure, is full: every partition wanted, epoch 0
   (asking for a session; after a failure with the old session's id, which the broker
   closes). A full answer that says session id 0 keeps the next fetch full.
2. Once the broker gave a session, each fetch is incremental: it lists only the partitions
   added or whose request changed (fetch offset, log start offset, leader epoch, ...) since
   the last request, and forgets the partitions no longer wanted. A partition left out of
   an incremental request is NOT dropped: the broker keeps fetching it as last asked. So a
   partition that must not be fetched this round (throttled, paused after an error) has to
   be left out of ``wanted``, which forgets it, and comes back as an added partition.
3. The answer of an incremental fetch holds only the partitions with news; the others are
   as they were. An answer naming a partition outside the session, or a full answer
   missing one, is a broken session: the next fetch is full (Kafka's verify*Partitions).
4. FETCH_SESSION_ID_NOT_FOUND: the next fetch asks for a new session (id 0, epoch 0); any
   other top-level error (INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR) or a
   failed request (``handle_error``, e.g. a lost connection): a full fetch that closes the
   old session and asks for a new one.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from tidelog.errors import ErrorCode
from tidelog.model import TopicPartition

#: A partition's request data.
P = TypeVar("P")

INVALID_SESSION_ID: Final = 0
INITIAL_EPOCH: Final = 0
_MAX_EPOCH: Final = 0x7FFFFFFF

#: The top-level errors that concern the session only: the next (full) fetch may go at once.
SESSION_ERRORS: Final = frozenset(
    {
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
    }
)


@dataclass(frozen=True, slots=True)
class SessionFetchRequest(Generic[P]):
    """What one fetch sends (Kafka's ``FetchRequestData``)."""

    session_id: int
    epoch: int
    #: The partitions to list: all of them in a full fetch, the changed ones else.
    to_send: dict[TopicPartition, P]
    to_forget: list[TopicPartition]

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


class FetchSessionHandler(Generic[P]):
    """The session with one broker; ``P`` is a partition's request data (compared by ``==``
    to find what changed)."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        #: The epoch of the next request: 0 makes it full (rule 1).
        self.epoch = INITIAL_EPOCH
        #: The partitions the broker's session holds once the last request is applied.
        self._partitions: dict[TopicPartition, P] = {}

    def build(
        self, wanted: Mapping[TopicPartition, P], changed: Collection[TopicPartition] | None = None
    ) -> SessionFetchRequest[P]:
        """The next request for ``wanted`` (rules 1, 2). ``changed``, when given, holds
        every partition added to, removed from or changed in ``wanted`` since the last
        call: only those are compared (a follower's idle round compares none)."""
        previous = self._partitions
        self._partitions = dict(wanted)
        if self.epoch == INITIAL_EPOCH:
            return SessionFetchRequest(self.session_id, self.epoch, dict(wanted), [])
        # The same object is unchanged without comparing its fields (a follower's fetcher
        # sends its idle partitions' requests again as the same objects).
        if changed is None:
            to_send = {
                tp: p for tp, p in wanted.items() if (old := previous.get(tp)) is not p and old != p
            }
            to_forget = [tp for tp in previous if tp not in wanted]
        else:
            to_send = {
                tp: p
                for tp in changed
                if (p := wanted.get(tp)) is not None
                and (old := previous.get(tp)) is not p
                and old != p
            }
            to_forget = [tp for tp in changed if tp in previous and tp not in wanted]
        return SessionFetchRequest(self.session_id, self.epoch, to_send, to_forget)

    def handle_response(
        self, error: ErrorCode, session_id: int, partitions: Collection[TopicPartition]
    ) -> bool:
        """Rules 3, 4: follow the broker's answer; whether its partitions may be used."""
        if error != ErrorCode.NONE:
            if error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH
            return False
        session = self._partitions
        if self.epoch == INITIAL_EPOCH:
            if len(partitions) != len(session) or any(tp not in session for tp in partitions):
                self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
                return False
            self.session_id = session_id
            self.epoch = INITIAL_EPOCH if session_id == INVALID_SESSION_ID else 1
            return True
        if any(tp not in session for tp in partitions):
            self.epoch = INITIAL_EPOCH
            return False
        if session_id == INVALID_SESSION_ID:
            # The broker closed the session (it became empty): start over.
            self.session_id, self.epoch = INVALID_SESSION_ID, INITIAL_EPOCH
        else:
            self.epoch = 1 if self.epoch == _MAX_EPOCH else self.epoch + 1
        return True

    def handle_error(self) -> None:
        """Rule 4: the request failed (no answer); the next fetch is full."""
        self.epoch = INITIAL_EPOCH


__all__ = ["SESSION_ERRORS", "FetchSessionHandler", "SessionFetchRequest"]
