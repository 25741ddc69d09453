"""What replaces or fixes Milvus Lite 3.2.2's internals: its BM25 and dense search paths,
the visibility of fresh writes, and its known faults; each checked against the installed
source it replaces."""
