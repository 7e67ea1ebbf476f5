"""Client quotas (KIP-13, KIP-124, KIP-546): the entities and their precedence, the rate
sensors and throttle times, and where the quota configs live (ZooKeeper or memory)."""
