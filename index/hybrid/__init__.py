"""Hybrid search on every backend: English text analysis for BM25 (the same everywhere), an
in-process BM25 index for stores without one, fusion of the dense and BM25 rankings, and
the per-collection calibration of the fusion weight."""
