"""The coordinators' asyncio shells: the group coordinator (``__consumer_offsets``), the
transaction coordinator (``__transaction_state``), transaction markers, and the internal topics
they share."""
