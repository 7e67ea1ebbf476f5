"""The admin znodes: topic configs (``/config/topics``), topic deletion
(``/admin/delete_topics``) and log dir event notifications (``/log_dir_event_notification``,
KIP-112), as Kafka's ``KafkaZkClient`` and ``AdminZkClient`` write them.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping

from kazoo.exceptions import (
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)

from tidelog.zk import znodes
from tidelog.zk.brokers import ControllerSeat
from tidelog.zk.errors import ZkError
from tidelog.zk.session import Watch, ZkSession
from tidelog.zk.znodes import (
    LogDirEvent,
    ZNodeDecodeError,
)

log = logging.getLogger(__name__)


class AdminZnodes(ZkSession):
    """Topic configs, topic deletion and log dir event notifications on one session."""

    async def watch_topic_deletions(self, callback: Callable[[frozenset[str]], None]) -> Watch:
        return await self.watch_children(
            znodes.DELETE_TOPICS_PATH, lambda names: callback(frozenset(names))
        )

    # -- topic configs ------------------------------------------------------------------------

    async def get_topic_config(self, topic: str) -> dict[str, str]:
        """The topic's overrides (empty when there are none)."""

        def run() -> dict[str, str]:
            try:
                data, _ = self._kz.retry(self._kz.get, znodes.topic_config_path(topic))
            except NoNodeError:
                return {}
            return znodes.decode_topic_config(topic, data)

        return await self._call(run)

    async def set_topic_config(self, topic: str, config: Mapping[str, str]) -> None:
        """Replace the topic's overrides and post a ``/config/changes`` notification."""

        def run() -> None:
            path = znodes.topic_config_path(topic)
            data = znodes.encode_topic_config(config)
            try:
                self._kz.retry(self._kz.set, path, data)
            except NoNodeError:
                self._kz.retry(self._kz.create, path, data, makepath=True)
            self._kz.retry(
                self._kz.create,
                znodes.CONFIG_CHANGE_PREFIX,
                znodes.encode_config_change(topic),
                sequence=True,
            )

        await self._call(run)

    # -- topic deletion -----------------------------------------------------------------------

    async def mark_topic_for_deletion(self, topic: str) -> bool:
        """Create ``/admin/delete_topics/<t>``; False when the topic does not exist."""

        def run() -> bool:
            if self._kz.retry(self._kz.exists, znodes.topic_path(topic)) is None:
                return False
            with contextlib.suppress(NodeExistsError):
                self._kz.retry(
                    self._kz.create, znodes.delete_topic_path(topic), znodes.DELETE_TOPIC_MARKER
                )
            return True

        return await self._call(run)

    async def get_topics_marked_for_deletion(self) -> frozenset[str]:
        names = await self._call(self._kz.retry, self._kz.get_children, znodes.DELETE_TOPICS_PATH)
        return frozenset(names)

    async def delete_topic_znodes(self, topic: str, seat: ControllerSeat) -> None:
        """The controller's last step of a deletion: drop the topic's nodes, then the marker."""

        def run() -> None:
            kz = self._kz
            # Fence first: a replaced controller must not delete anything.
            epoch = kz.retry(kz.exists, znodes.CONTROLLER_EPOCH_PATH)
            if epoch is None or int(epoch.version) != seat.epoch_zk_version:
                raise ZkError("controller moved: not deleting " + topic)
            for path in (znodes.topic_path(topic), znodes.topic_config_path(topic)):
                with contextlib.suppress(NoNodeError):
                    try:
                        kz.retry(kz.delete, path, recursive=True)
                    except NotEmptyError:  # a child appeared while deleting: once more
                        kz.retry(kz.delete, path, recursive=True)
            with contextlib.suppress(NoNodeError):
                kz.retry(kz.delete, znodes.delete_topic_path(topic))

        await self._call(run)

    # -- log dir events (Kafka's ZkLogDirEventNotification, KIP-112) -------------------------

    async def post_log_dir_event(self, event: LogDirEvent) -> str:
        """Create ``/log_dir_event_notification/log_dir_event_<seq>`` (persistent, sequential,
        as Kafka's ``propagateLogDirEvent``); returns the node's name."""

        def run() -> str:
            path = self._kz.retry(
                self._kz.create, znodes.LOG_DIR_EVENT_PREFIX, event.encode(), sequence=True
            )
            return str(path).rsplit("/", 1)[-1]

        return await self._call(run)

    async def watch_log_dir_events(self, callback: Callable[[list[str]], None]) -> Watch:
        """The pending notifications' names, now and whenever they change (the controller's
        LogDirEventNotificationHandler)."""
        return await self.watch_children(znodes.LOG_DIR_EVENT_NOTIFICATION_PATH, callback)

    async def get_log_dir_events(self) -> list[tuple[str, LogDirEvent | None]]:
        """Every pending notification in sequence order; None for one that does not decode
        (logged; the controller deletes it like the others)."""

        def run() -> list[tuple[str, LogDirEvent | None]]:
            kz = self._kz
            names = kz.retry(kz.get_children, znodes.LOG_DIR_EVENT_NOTIFICATION_PATH)
            out: list[tuple[str, LogDirEvent | None]] = []
            # The sequence suffix is zero-padded: the names sort in creation order.
            for name in sorted(names):
                try:
                    data, _ = kz.retry(kz.get, f"{znodes.LOG_DIR_EVENT_NOTIFICATION_PATH}/{name}")
                except NoNodeError:
                    continue
                try:
                    out.append((name, LogDirEvent.decode(data)))
                except ZNodeDecodeError:
                    log.exception("ignoring log dir event %s", name)
                    out.append((name, None))
            return out

        return await self._call(run)

    async def delete_log_dir_events(self, names: Iterable[str]) -> None:
        """Drop processed notifications (Kafka's deleteLogDirEventNotifications)."""

        def run() -> None:
            for name in names:
                with contextlib.suppress(NoNodeError):
                    self._kz.retry(
                        self._kz.delete, f"{znodes.LOG_DIR_EVENT_NOTIFICATION_PATH}/{name}"
                    )

        await self._call(run)
