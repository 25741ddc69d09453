"""Text Embeddings Inference's routes, in TEI's shapes and with TEI's error body
(``{"error", "error_type"}``), so TEI's clients (huggingface_hub's ``InferenceClient``,
pymilvus' ``TEIEmbeddingFunction`` and ``TEIRerankFunction``, LangChain's and LlamaIndex's
TEI classes) work unchanged: ``POST /`` and ``/embed`` (vectors), ``/embed_all`` (token
vectors), ``/rerank``, ``/similarity``, ``/tokenize``, ``/decode`` and ``GET /info``.

``/rerank`` scores with what the service has: its cross-encoder reranker where one is
loaded (``QKV_RERANKER``: sigmoid of its logit, as TEI serves a cross-encoder, or the logit
with ``raw_scores``), else the encoder's cosine ((1 + cos) / 2, or the cosine with
``raw_scores``); with the ``hybrid`` extension, the cosine fused with BM25 over the given
texts, as hybrid search fuses them."""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi import APIRouter, Depends, Request, Response

from api import schemas as s
from api.embedding_routes import texts_of
from api.errors import invalid
from api.lean import Hot, body_only
from api.routes import TEI_ERRORS, json_response, require_key, service
from api.service import Service
from encoder.tokenizer import clean_text
from index import Hit
from index.hybrid.bm25 import BM25Index
from index.hybrid.fusion import fuse

tei = APIRouter(dependencies=[Depends(require_key)], responses=TEI_ERRORS, tags=["tei"])


async def embed_answer(svc: Service, body: s.TeiEmbedRequest) -> Response:
    """``POST /embed``'s (and ``/``'s) answer to a body that parsed, for the routes and for
    :class:`api.lean.LeanRoutes` alike."""
    emb = await svc.embed(texts_of(body.inputs, svc.settings.max_inputs), body.truncate,
                          normalize=body.normalize)
    resp = json_response(emb.vectors)
    resp.headers["X-Truncated"] = "true" if any(emb.truncated) else "false"
    return resp


@tei.post("/embed", response_model=list[list[float]])
async def tei_embed(body: s.TeiEmbedRequest, request: Request) -> Response:
    """An array of vectors, one per input. Whether any input was cut is in the
    ``X-Truncated`` header (TEI's body has no room for it)."""
    return await embed_answer(service(request), body)


@tei.post("/", response_model=list[list[float]])
async def tei_root(body: s.TeiEmbedRequest, request: Request) -> Response:
    """TEI's root route for an embedding model (huggingface_hub's ``feature_extraction``):
    the same as ``/embed``."""
    return await embed_answer(service(request), body)


# answered past FastAPI's routing when the body parses (api.lean)
HOT = [Hot(tei, path, s.TeiEmbedRequest, body_only(embed_answer)) for path in ("/embed", "/")]


@tei.post("/embed_all", response_model=list[list[list[float]]])
async def embed_all(body: s.TeiEmbedAllRequest, request: Request) -> Response:
    """Each input's token vectors (the encoder's last states, ``<s>`` first): an array of
    (tokens × dim) arrays."""
    svc = service(request)
    texts = texts_of(body.inputs, svc.settings.max_inputs)
    svc.tokenize(texts, body.truncate)  # 422 over the token limit without truncate
    return json_response(await svc.encode_aside(texts, svc.encoder.token_vectors, texts))


@tei.post("/rerank", response_model=list[s.Rank])
async def rerank(body: s.RerankRequest, request: Request) -> Response:
    """``texts`` ranked for ``query``, best first: ``[{index, score, text?}]``."""
    svc = service(request)
    texts = texts_of(body.texts, svc.settings.max_inputs)
    if svc.reranker is not None and not body.hybrid:
        logits = (await svc.rerank(body.query, texts, body.truncate)).astype(np.float64)
        scores = logits if body.raw_scores else 1.0 / (1.0 + np.exp(-logits))
        ranked = sorted(((i, float(x)) for i, x in enumerate(scores)), key=lambda r: -r[1])
        return json_response([{"index": i, "score": score} | (
            {"text": texts[i]} if body.return_text else {}) for i, score in ranked])
    emb = await svc.embed([body.query, *texts], body.truncate)
    cos = (emb.vectors[1:] @ emb.vectors[0]).astype(np.float64)
    if body.hybrid:
        w = svc.dense_weight if body.dense_weight is None else body.dense_weight
        keys = [str(i) for i in range(len(texts))]
        dense = [Hit(keys[i], float(c), texts[i], None, {}) for i, c in enumerate(cos)]
        bm25 = [Hit(keys[i], sc, texts[i], None, {}) for i, sc in
                BM25Index.from_texts(texts).top(body.query, len(texts), keys)]
        ranked = [(int(h.id), h.score) for h in fuse(dense, bm25, len(texts), "convex", w)]
    else:
        scores = cos if body.raw_scores else (1.0 + cos) / 2.0
        ranked = sorted(((i, float(x)) for i, x in enumerate(scores)), key=lambda r: -r[1])
    out: list[dict[str, Any]] = []
    for i, score in ranked:
        out.append({"index": i, "score": score} | ({"text": texts[i]} if body.return_text
                                                    else {}))
    return json_response(out)


@tei.post("/similarity", response_model=list[float])
async def similarity(body: s.SimilarityRequest, request: Request) -> Response:
    """The cosine of ``source_sentence`` with each of ``sentences``, in their order."""
    svc = service(request)
    truncate = (body.parameters or {}).get("truncate", False)
    if not isinstance(truncate, bool):
        raise invalid("parameters.truncate must be a boolean", "parameters.truncate")
    sentences = texts_of(body.inputs.sentences, svc.settings.max_inputs)
    emb = await svc.embed([body.inputs.source_sentence, *sentences], truncate)
    return json_response((emb.vectors[1:] @ emb.vectors[0]).astype(np.float32))


@tei.post("/tokenize", response_model=list[list[s.SimpleToken]])
async def tokenize(body: s.TokenizeRequest, request: Request) -> Response:
    """Each input's tokens, as the encoder cuts them (whole: no token limit here): id, the
    text it covers, whether it is special, and its byte span in the input."""
    svc = service(request)
    texts = texts_of(body.inputs, svc.settings.max_inputs)
    return json_response(await svc.encode_aside(texts, _tokens, svc.encoder.tokenizer, texts,
                                                body.add_special_tokens))


def _tokens(tok: Any, texts: list[str], special: bool) -> list[list[dict[str, Any]]]:
    """Each text's tokens: id, the text it covers, whether it is special, its byte span."""
    out = []
    for text in texts:
        clean = clean_text(text)
        enc = tok.encode(clean, add_special_tokens=special)
        tokens: list[dict[str, Any]] = []
        for i, is_special, (a, b) in zip(enc.ids, enc.special_tokens_mask, enc.offsets,
                                         strict=True):
            if is_special:
                tokens.append({"id": i, "text": tok.id_to_token(i), "special": True,
                               "start": None, "stop": None})
            else:
                start = len(clean[:a].encode())
                tokens.append({"id": i, "text": clean[a:b], "special": False,
                               "start": start, "stop": start + len(clean[a:b].encode())})
        out.append(tokens)
    return out


@tei.post("/decode", response_model=list[str])
async def decode(body: s.DecodeRequest, request: Request) -> Response:
    """Token ids (one list, or a list of lists) back to text, one string per list."""
    svc = service(request)
    tok = svc.encoder.tokenizer
    lists = body.ids if isinstance(body.ids[0], list) else [body.ids]
    size = tok.get_vocab_size()
    for ids in lists:
        assert isinstance(ids, list)
        bad = next((i for i in ids if i >= size), None)
        if bad is not None:
            raise invalid(f"token id {bad} is not in the encoder's vocabulary of {size}", "ids")
    return json_response([tok.decode(ids, skip_special_tokens=body.skip_special_tokens)
                          for ids in lists])


@tei.get("/info", response_model=s.Info)
async def info(request: Request) -> Response:
    """The served encoder (and reranker, in ``model_type``) and this server's limits, in
    TEI's shape."""
    svc = service(request)
    st = svc.settings
    dtype = str(next(svc.encoder.model.parameters()).dtype).removeprefix("torch.")
    kinds: dict[str, dict[str, str]] = {"embedding": {"pooling": "attention"}}
    if svc.reranker is not None:  # what /rerank and a search's rerank score with
        kinds["reranker"] = {"id": svc.reranker.name, "fingerprint": svc.reranker.fingerprint,
                             "backend": svc.reranker.backend}
    return json_response({
        "model_id": svc.info.name, "model_sha": svc.info.fingerprint, "model_dtype": dtype,
        "model_type": kinds,
        "max_concurrent_requests": st.queue_max, "max_input_length": svc.encoder.max_tokens,
        "max_batch_tokens": st.batch_max_tokens, "max_batch_requests": st.batch_max_size,
        "max_client_batch_size": st.max_inputs, "auto_truncate": False,
        "tokenization_workers": 1, "version": request.app.version, "sha": None,
        "docker_label": None})
