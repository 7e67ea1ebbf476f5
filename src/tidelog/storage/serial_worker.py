"""One daemon thread that runs calls in the order they were handed to it.

Storage uses it for work a broker's event loop must not wait on and nothing waits for:
the page-cache hints (``tidelog.storage.page_cache``) and the removal of a deleted
partition's directory (``tidelog.storage.local_log.remove_log_directory``). The thread
starts on the first call. A daemon thread dies with the process: whatever it had not run
yet is lost, so only calls whose loss a restart tolerates may be handed to it (a hint; a
``*-delete`` directory, which the next start removes).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class SerialWorker:
    """Runs calls in order on one daemon thread named ``name``, started on the first call.
    A call's exception is logged and ends only that call."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.Queue[Callable[[], object]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def pending(self) -> int:
        """Calls waiting for the thread (the one it runs is no longer counted)."""
        return self._queue.qsize()

    def submit(self, call: Callable[[], object]) -> None:
        """Run ``call()`` on the worker thread after every call submitted before it."""
        if self._thread is None or not self._thread.is_alive():
            with self._start_lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
        self._queue.put(call)

    def settle(self) -> None:
        """Wait until every call submitted so far has run."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            call = self._queue.get()
            try:
                call()
            except Exception:
                log.exception("%s: a queued call failed", self._name)
            finally:
                self._queue.task_done()


__all__ = ["SerialWorker"]
