"""The replication core: pure, IO-free partition state (DESIGN.md, replication rules 2-9)."""
