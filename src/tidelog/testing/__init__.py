"""tidelog.testing: the deterministic replication simulator (DESIGN.md, Layers).

- :mod:`tidelog.testing.sim` — ``Simulation(SimConfig, seed)``: brokers running the real
  ``tidelog.replication`` code, the real ``tidelog.controller.decisions``, a simulated clock
  and network, faults (crash, bounce, pause, network partition, preferred election,
  controlled shutdown, controller failover), partition reassignment (KIP-455), producers
  (acks 0/1/-1) and consumers. Its parts: ``sim_types`` (config, logs, messages, stats),
  ``sim_core`` (clock, event queue, network), ``sim_broker`` (the brokers' replication),
  ``sim_controller`` (the controller and reassignment); ``sim`` adds clients and faults.
- :mod:`tidelog.testing.invariants` — ``InvariantChecker``: the guarantees, checked after
  every event; violations are collected as values.
- :mod:`tidelog.testing.soak` — random seeds (``python -m tidelog.testing.soak``), each
  replayable with ``--replay SEED``.
"""
