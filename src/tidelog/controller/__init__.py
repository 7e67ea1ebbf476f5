"""The cluster controller: elections, ISR changes, topic and reassignment admin, over
ZooKeeper (docs/design.md, rules 5, 9-12).

``tidelog.controller.decisions`` holds the controller's pure decisions (elections, the
AlterPartition compare-and-set, replica assignment) shared by the ZooKeeper-backed controller
and the deterministic simulator in ``tidelog.testing``; ZooKeeper itself is reached only
through ``tidelog.zk``.
"""
