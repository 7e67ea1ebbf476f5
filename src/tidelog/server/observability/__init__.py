"""What a running broker shows: Prometheus metrics, the web console and structured logs."""
