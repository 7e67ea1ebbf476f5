"""This broker's replicas: the replica manager (produce and fetch paths), the purgatory of
delayed operations, replication throttles, log-dir moves and stray replicas."""
