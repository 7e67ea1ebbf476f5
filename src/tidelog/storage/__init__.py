"""Partition logs on disk, in Kafka's layout (docs/design.md "On disk"). Blocking IO, no
asyncio.

Public API (see each module's docstring):
  * ``log``: ``LogConfig``, ``Log``, ``AppendInfo``, ``FetchSlice`` (the log's parts:
    ``log_config``, ``local_log``, ``log_loader``, ``batch_validation``, ``crc_helper``,
    ``append_plan``, ``log_reads``, ``log_retention``, ``log_flush``, ``log_truncation``)
  * ``cleaner``: ``LogCleaner`` (compaction; ``offset_map``, ``segment_swap``)
  * ``log_manager``: ``LogManager`` (all logs of a broker across its log dirs)
  * ``checkpoints``: ``OffsetCheckpointFile``, ``LeaderEpochCheckpointFile``,
    ``PartitionMetadataFile``
  * ``epoch_cache``: ``LeaderEpochFileCache`` (the persisted leader epoch cache)
  * ``errors``: ``StorageError`` and subclasses
  * ``producer_state``: ``ProducerStateManager`` (idempotent and transactional producer
    state per partition, ``Log.producer_state``; entries in ``producer_entry``, snapshots
    ``<offset>.snapshot`` in ``producer_snapshot``)
  * ``transactions``: transaction markers (``parse_end_txn_marker``) and the ongoing /
    unreplicated transactions behind ``Log.last_stable_offset`` (``TxnTracker``)
  * ``txn_index``: ``TransactionIndex``, a segment's aborted transactions
    (``<offset>.txnindex``, Kafka's format)
  * ``producer_id``: ``ProducerIdManager`` (producer id blocks for InitProducerId)
"""
