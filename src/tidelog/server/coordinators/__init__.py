"""The coordinators' asyncio shells: the group coordinator (``__consumer_offsets``) and its
handler groups, FindCoordinator, the transaction coordinator (``__transaction_state``),
transaction markers, and the internal topics they share."""
