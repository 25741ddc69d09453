"""How qkv lays a collection out in Milvus, and turns Milvus rows back into items and hits.

Fields: ``id`` VARCHAR primary key, ``vector`` FLOAT_VECTOR (inner product), ``text`` and
``value`` VARCHAR, ``metadata`` JSON; the encoder in the collection's properties. A hybrid
collection adds ``bm25_text``, the analysed copy of ``text`` (:func:`bm25_text`), and
``sparse``, which Milvus' BM25 function fills from it (k1 and b as bm25s); an item's
``keywords`` where it has them (a passage's window, :mod:`index.passages`).
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from index.hybrid.analysis import BM25_B, BM25_K1, STOP_WORDS, analyzed, fit_terms
from index.store import MAX_ID_BYTES, MAX_TEXT_BYTES, CollectionInfo, EncoderInfo, Hit, Item
from index.tenancy import MAX_TENANT_CHARS, TENANT_FIELD, local_id

ENCODER_PROPERTY = "qkv.encoder"
CALIBRATION_PROPERTY = "qkv.calibration"  # hybrid's calibration (index.hybrid.calibration)
PASSAGES_PROPERTY = "qkv.passages"  # how documents are cut (index.passages.Settings)
CALIBRATION_JOB_PROPERTY = "qkv.calibration_job"  # its last calibration job's state
OUTPUT_FIELDS = ["id", "text", "value", "metadata"]
SPARSE_FIELD = "sparse"
BM25_FIELD = "bm25_text"  # the analysed copy of ``text`` that BM25 indexes
# Hybrid collections from before BM25_FIELD analyse ``text`` itself; their queries go without
# English stop words: Milvus Lite scans every query term's postings, and at 100,000
# documents a query's BM25 p50 fell from 647 ms to 99 ms once they were left out.
_STOP_RE = re.compile(r"\b(?:" + "|".join(sorted(STOP_WORDS)) + r")\b", re.IGNORECASE)


def create_collection(client: Any, name: str, dim: int, encoder: EncoderInfo | None,
                      hybrid: bool, index_type: str, build: dict[str, Any],
                      timeout: float, multi_tenant: bool = False,
                      partition_key: bool = True) -> None:
    """Create collection ``name`` with qkv's schema and indexes through ``client``; a
    multi-tenant one has a ``tenant`` field (the partition key where ``partition_key``),
    and ids ``tenant:id``."""
    from pymilvus import DataType, Function, FunctionType, MilvusClient

    schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    id_bytes = MAX_ID_BYTES + (MAX_TENANT_CHARS + 1 if multi_tenant else 0)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=id_bytes)
    if multi_tenant:
        schema.add_field(TENANT_FIELD, DataType.VARCHAR, max_length=MAX_TENANT_CHARS,
                         is_partition_key=partition_key)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
    schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT_BYTES)
    schema.add_field("value", DataType.VARCHAR, max_length=MAX_TEXT_BYTES)
    schema.add_field("metadata", DataType.JSON)
    params = client.prepare_index_params()
    params.add_index(field_name="vector", index_type=index_type, metric_type="IP",
                     params=build)
    if hybrid:
        # The stems are already lower-case words; the standard tokenizer keeps them whole.
        schema.add_field(BM25_FIELD, DataType.VARCHAR, max_length=MAX_TEXT_BYTES,
                         enable_analyzer=True, analyzer_params={"tokenizer": "standard"})
        schema.add_field(SPARSE_FIELD, DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(Function(
            name="text_bm25", function_type=FunctionType.BM25,
            input_field_names=[BM25_FIELD], output_field_names=[SPARSE_FIELD]))
        params.add_index(field_name=SPARSE_FIELD, index_type="SPARSE_INVERTED_INDEX",
                         metric_type="BM25", params={"bm25_k1": BM25_K1, "bm25_b": BM25_B})
    props = {ENCODER_PROPERTY: json.dumps(encoder.to_dict() if encoder else None)}
    client.create_collection(name, schema=schema, index_params=params, properties=props,
                             consistency_level="Bounded", timeout=timeout)


def described(name: str, d: dict[str, Any]) -> tuple[CollectionInfo, bool]:
    """The info of collection ``name`` from Milvus' ``describe_collection`` answer ``d``, and
    whether it has :data:`BM25_FIELD`."""
    dim = next(int(f["params"]["dim"]) for f in d["fields"] if f["name"] == "vector")
    props = d.get("properties", {})
    raw = json.loads(props.get(ENCODER_PROPERTY, "null"))
    calibration = json.loads(props.get(CALIBRATION_PROPERTY, "null"))
    passages = json.loads(props.get(PASSAGES_PROPERTY, "null"))
    job = json.loads(props.get(CALIBRATION_JOB_PROPERTY, "null"))
    names = {f["name"] for f in d["fields"]}
    info = CollectionInfo(name, dim, EncoderInfo.from_dict(raw) if raw else None,
                          SPARSE_FIELD in names, TENANT_FIELD in names,
                          calibration if isinstance(calibration, dict) else None,
                          passages if isinstance(passages, dict) else None,
                          job if isinstance(job, dict) else None)
    return info, BM25_FIELD in names


def bm25_text(text: str) -> str:
    """What ``bm25_text`` holds for ``text``: :func:`index.hybrid.analysis.analyzed`, cut at a space
    to fit a VARCHAR of MAX_TEXT_BYTES (lower-casing can lengthen a text in UTF-8)."""
    return fit_terms(analyzed(text), MAX_TEXT_BYTES)


def bm25_of(item: Item) -> str:
    """What ``bm25_text`` holds for ``item``: its :attr:`~index.store.Item.keywords` as they
    are (already analysed, and within the field: :func:`index.store.check_item`), else
    :func:`bm25_text` of its text."""
    return item.keywords if item.keywords is not None else bm25_text(item.text)


def bm25_query(text: str) -> str:
    """For a collection without ``bm25_text``: the query text without English stop words
    (all of it when nothing else is left)."""
    kept = _STOP_RE.sub(" ", text)
    return kept if kept.strip(" \t\n\r.,;:!?'\"()-") else text


def item_fields(multi_tenant: bool, brief: bool = False, keywords: bool = False) -> list[str]:
    """The fields a read of whole items asks for (``brief``: id, value and metadata;
    ``keywords``: and :data:`BM25_FIELD`, what a copy of the rows writes again)."""
    fields = ["id", "value", "metadata"] if brief else [*OUTPUT_FIELDS, "vector"]
    return [*fields, *([TENANT_FIELD] if multi_tenant else []),
            *([BM25_FIELD] if keywords else [])]


def item(row: dict[str, Any], multi_tenant: bool = False) -> Item:
    """A row as an item; with :data:`BM25_FIELD` read, its terms as the item's keywords."""
    return Item(id=local_id(str(row["id"]), multi_tenant),
                vector=np.asarray(row.get("vector", ()), dtype=np.float32),
                text=row.get("text") or "", value=row.get("value") or None,
                metadata=dict(row.get("metadata") or {}), tenant=row.get(TENANT_FIELD),
                keywords=row.get(BM25_FIELD))


def hit(h: dict[str, Any], with_vector: bool, side: str, multi_tenant: bool = False) -> Hit:
    e = h.get("entity", {})
    vec = np.asarray(e["vector"], dtype=np.float32) if with_vector else None
    score = float(h["distance"])
    if side == "bm25":
        score = abs(score)  # BM25 is >= 0; Milvus Lite reports it negated (best = lowest)
    return Hit(id=local_id(str(h["id"]), multi_tenant), score=score, text=e.get("text") or "",
               value=e.get("value") or None, metadata=dict(e.get("metadata") or {}), vector=vec,
               sources={side: score})
