"""The bulk indexing job: corpus readers (JSONL, CSV, Parquet, documents), the job itself
(read, encode in batches, upsert, resumable and shardable), and ranges for a pool of
workers."""
