"""The controller history's znode (``HISTORY_PATH``): one JSON document, written whole by the
active controller and read by any broker (``tidelog.controller.history`` owns its format).

Both functions block (kazoo calls, retried across connection losses): run them through
``ZkSession.call``.
"""

from __future__ import annotations

from typing import Any, Final

from kazoo.exceptions import NodeExistsError, NoNodeError

HISTORY_PATH: Final = "/tidelog/controller_history"


def write_history_blocking(kz: Any, data: bytes) -> None:
    """Replace the history znode's data (creating the node and its parents if absent)."""
    try:
        kz.retry(kz.set, HISTORY_PATH, data)
    except NoNodeError:
        try:
            kz.retry(kz.create, HISTORY_PATH, data, makepath=True)
        except NodeExistsError:
            kz.retry(kz.set, HISTORY_PATH, data)


def read_history_blocking(kz: Any) -> bytes | None:
    """The history znode's data; None when there is none."""
    try:
        data, _stat = kz.retry(kz.get, HISTORY_PATH)
    except NoNodeError:
        return None
    return bytes(data) if data is not None else None
