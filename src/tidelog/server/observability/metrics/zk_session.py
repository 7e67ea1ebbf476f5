"""The ZooKeeper session as the metrics and the console show it: Kafka's
SessionExpireListener figures (kafka.server:type=SessionExpireListener)."""

from __future__ import annotations

from typing import Final

from tidelog.zk import SessionEvent

#: kafka.server:type=SessionExpireListener,name=SessionState values shown (ZooKeeper's
#: CONNECTED and CONNECTING, and EXPIRED for a lost session not re-established yet).
SESSION_STATES: Final = ("CONNECTED", "CONNECTING", "EXPIRED")


class ZkSessionTracker:
    """Counts ZooKeeper session losses (a ``ZkClient`` session listener) and remembers
    whether the last one was an expiry not yet followed by a new session."""

    def __init__(self) -> None:
        self.disconnects = 0
        self.expires = 0
        self.expired = False

    def __call__(self, event: SessionEvent, _broker_epoch: int | None) -> None:
        if event is SessionEvent.SUSPENDED:
            self.disconnects += 1
        elif event is SessionEvent.EXPIRED:
            self.expires += 1
            self.expired = True
        elif event is SessionEvent.REESTABLISHED:
            self.expired = False


def session_state(*, connected: bool, tracker: ZkSessionTracker | None) -> str:
    """One of ``SESSION_STATES``: CONNECTED while the client is connected, EXPIRED after an
    expiry the ``tracker`` saw and no new session yet, else CONNECTING."""
    if connected:
        return "CONNECTED"
    if tracker is not None and tracker.expired:
        return "EXPIRED"
    return "CONNECTING"


__all__ = ["SESSION_STATES", "ZkSessionTracker", "session_state"]
