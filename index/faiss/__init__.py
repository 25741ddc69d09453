"""The FAISS backend: ``FaissStore`` (flat or HNSW, in process, persisted to a directory)
and its in-memory collections with their write log."""
