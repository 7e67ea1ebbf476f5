"""An alias of ``tidelog.testing.zookeeper`` for ``scripts/measure_console.py`` (scripts/ is
outside the change that moved the launcher); everything else imports
``tidelog.testing.zookeeper`` and ``tidelog.testing.processes``."""

from __future__ import annotations

from tidelog.testing.processes import free_port
from tidelog.testing.zookeeper import ZooKeeperProcess, ZooKeeperStartError

__all__ = ["ZooKeeperProcess", "ZooKeeperStartError", "free_port"]
