"""The Milvus backend: ``MilvusStore`` over a Lite file or a server URI, its connection,
schema, reads and searches, and the sealing of what was written; ``lite/`` holds what
replaces Milvus Lite's own internals."""
