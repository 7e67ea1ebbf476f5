"""Answers built by a coroutine (ZooKeeper reads and writes) rather than at once.

A handler group hands the coroutine that describes its response to :class:`AnswerTasks`;
the dispatcher awaits the returned future. The tasks are kept referenced until done, so the
event loop cannot collect one mid-flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from typing import Any

from kio.index import load_response_schema

from tidelog.protocol.codec import RequestHeader
from tidelog.protocol.messages import build


class AnswerTasks:
    """The running answers of one handler group."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(
        self, header: RequestHeader, work: Coroutine[Any, Any, Mapping[str, Any]]
    ) -> asyncio.Future[Any]:
        """Run ``work`` and answer with the response (of ``header``'s API and version) that
        its result describes."""

        async def run() -> Any:
            data = await work
            return build(load_response_schema(header.api_key, header.api_version), data)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
