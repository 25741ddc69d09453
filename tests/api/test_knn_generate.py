"""``generate`` with a collection's token memory (kNN-MT): used by default, its options
checked at the edge, its votes shown per output token, and refused when it is not the
collection's decoder's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import MakeClient

from decoder.knn import MemoryMismatchError
from decoder.testing import tiny_decoder, toy_pairs
from wiring.token_memory import build_token_memory

PAIRS = toy_pairs(30, seed=5)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(decoder, its token memory of PAIRS with ids t0.., the pairs' JSONL)."""
    tmp = tmp_path_factory.mktemp("knn-api")
    dec = tiny_decoder(tmp / "dec")
    pairs = tmp / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"id": f"t{i}", "text": en, "value": fr}) + "\n"
                             for i, (en, fr) in enumerate(PAIRS)))
    info = build_token_memory(dec, None, tmp / "memory", pairs_jsonl=pairs, progress=False)
    assert info["pairs"] == 30 and info["layout"] == "Flat" and info["keys"] > 30
    return dec, tmp / "memory", pairs


def test_generate_with_the_token_memory(make_client: MakeClient,
                                        setup: tuple[Path, Path, Path]) -> None:
    dec, memory, pairs = setup
    client = make_client(decoders={"tm_knn": str(dec), "tm_plain": str(dec)},
                         token_memories={"tm-knn": str(memory)})
    for name in ("tm_knn", "tm_plain"):
        client.delete(f"/v1/collections/{name}")
        assert client.post("/v1/collections", json={"name": name}).status_code == 201
    docs = [json.loads(line) for line in pairs.read_text().splitlines()]
    assert client.post("/v1/collections/tm_knn/documents",
                       json={"documents": docs}).status_code == 200
    url = "/v1/collections/tm_knn/generate"
    source, target = PAIRS[7]

    # the memory alone (λ = 1, nearest token only): the untrained decoder writes the target
    exact = {"k": 1, "lambda": 1.0, "temperature": 1.0, "adaptive": False,
             "return_votes": True}
    r = client.post(url, json={"query": source, "top_k": 0, "beam": 2, "knn": exact})
    body = r.json()
    assert r.status_code == 200, body
    assert body["text"] == target
    knn = body["knn"]
    assert knn["keys"] > 30 and knn["mean_lambda"] == pytest.approx(1.0)
    tokens = knn["tokens"]
    assert tokens[-1]["token"] == "</s>" and len(tokens) >= 3
    for t in tokens:  # each output token was voted for by this very pair
        assert t["lambda"] == 1.0 and t["p_memory"] == pytest.approx(1.0)
        assert t["votes"] == [{"id": "t7", "token": t["token"], "weight": 1.0}]

    default = client.post(url, json={"query": source, "top_k": 0, "max_tokens": 6}).json()
    assert default["knn"]["keys"] == knn["keys"] and "tokens" not in default["knn"]
    assert 0.0 <= default["knn"]["mean_lambda"] <= 0.35 + 1e-6  # the default λ at most
    off = client.post(url, json={"query": source, "top_k": 0, "max_tokens": 6,
                                 "knn": {"enabled": False}}).json()
    assert off["knn"] is None

    for bad in ({"lambda": 1.5}, {"lambda": -0.1}, {"temperature": 0}, {"reach": -1},
                {"k": 0}, {"k": 5000}, {"k": "8"}, {"nope": 1}):
        r = client.post(url, json={"query": source, "knn": bad})
        assert r.status_code == 422, (bad, r.text)
    r = client.post("/v1/collections/tm_plain/generate", json={"query": source, "knn": {}})
    assert r.status_code == 409 and "no token memory" in r.json()["error"]["message"]
    plain = client.post("/v1/collections/tm_plain/generate", json={"query": source}).json()
    assert plain["knn"] is None  # no memory, none asked for: the decoder alone
    for name in ("tm_knn", "tm_plain"):
        client.delete(f"/v1/collections/{name}")


def test_a_memory_of_another_decoder_is_refused_at_start(
        make_client: MakeClient, setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, memory, _ = setup
    other = tiny_decoder(tmp_path / "other", seed=1)
    with pytest.raises(MemoryMismatchError, match="build it again"):
        make_client(decoders={"tm_knn": str(other)}, token_memories={"tm_knn": str(memory)})
    with pytest.raises(ValueError, match="no decoder"):
        make_client(token_memories={"tm_knn": str(memory)})


def test_pairs_added_through_the_api_vote_at_once_and_after_a_restart(
        make_client: MakeClient, setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """The translation memory grows: the new pair's tokens join the token memory without a
    rebuild (the untrained decoder, memory alone, writes its target), survive a restart,
    and stop voting once the pair is deleted."""
    import shutil

    dec, built, _ = setup
    memory = tmp_path / "memory"
    shutil.copytree(built, memory)
    changes = memory / "changes"
    had = set(changes.iterdir()) if changes.is_dir() else set()
    known = {en for en, _ in PAIRS}
    source, target = next(p for p in toy_pairs(60, seed=9) if p[0] not in known)
    settings = {"decoders": {"tm_grow": str(dec)}, "token_memories": {"tm_grow": str(memory)}}
    client = make_client(**settings)
    client.delete("/v1/collections/tm_grow")
    assert client.post("/v1/collections", json={"name": "tm_grow"}).status_code == 201
    exact = {"k": 1, "lambda": 1.0, "temperature": 1.0, "adaptive": False,
             "return_votes": True}
    ask = {"query": source, "top_k": 0, "beam": 1, "knn": exact}
    before = client.post("/v1/collections/tm_grow/generate", json=ask).json()
    assert before["text"] != target
    assert all(v["id"] != "new-1" for t in before["knn"]["tokens"] for v in t["votes"])

    r = client.post("/v1/collections/tm_grow/documents",
                    json={"documents": [{"id": "new-1", "text": source, "value": target}]})
    assert r.status_code == 200, r.text
    after = client.post("/v1/collections/tm_grow/generate", json=ask).json()
    assert after["text"] == target
    assert after["knn"]["keys"] > before["knn"]["keys"]
    assert all(t["votes"][0]["id"] == "new-1" for t in after["knn"]["tokens"])
    assert len(set(changes.iterdir()) - had) == 1  # one change, appended beside the memory

    again = make_client(**settings)  # a restart reads the change back
    restarted = again.post("/v1/collections/tm_grow/generate", json=ask).json()
    assert restarted["text"] == target and restarted["knn"] == after["knn"]

    r = again.request("DELETE", "/v1/collections/tm_grow/documents", json={"ids": ["new-1"]})
    assert r.status_code == 200, r.text
    gone = again.post("/v1/collections/tm_grow/generate", json=ask).json()
    assert gone["text"] != target
    assert all(v["id"] != "new-1" for t in gone["knn"]["tokens"] for v in t["votes"])
    again.delete("/v1/collections/tm_grow")


def test_a_multi_tenant_token_memory_keeps_tenants_apart(
        make_client: MakeClient, setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """Issue 68, finding 2: the token memory of a multi-tenant collection held pairs by
    their bare ids, so tenant a's generate was steered by (and its votes named) tenant b's
    confidential pair, and a's writes deleted and overwrote b's entries."""
    import shutil

    dec, built, _ = setup
    memory = tmp_path / "memory"
    shutil.copytree(built, memory)
    known = {en for en, _ in PAIRS}
    fresh = [p for p in toy_pairs(80, seed=11) if p[0] not in known]
    (source, target_b), (_, target_a) = fresh[0], fresh[1]
    assert target_a != target_b
    settings = {"decoders": {"tm_mt": str(dec)}, "token_memories": {"tm_mt": str(memory)}}
    client = make_client(**settings)
    client.delete("/v1/collections/tm_mt")
    assert client.post("/v1/collections", json={"name": "tm_mt", "multi_tenant": True}
                       ).status_code == 201
    url, docs = "/v1/collections/tm_mt/generate", "/v1/collections/tm_mt/documents"
    exact = {"k": 1, "lambda": 1.0, "temperature": 1.0, "adaptive": False,
             "return_votes": True}
    ask = {"query": source, "top_k": 0, "beam": 1, "knn": exact}

    def gen(tenant: str, c: object = client) -> dict:  # type: ignore[type-arg]
        r = c.post(url, json=ask, headers={"X-Tenant": tenant})  # type: ignore[attr-defined]
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    def voters(body: dict) -> set[str]:  # type: ignore[type-arg]
        return {v["id"] for t in body["knn"]["tokens"] for v in t["votes"]}

    assert client.post(url, json=ask).status_code == 422  # a tenant is needed, as to search
    r = client.post(docs, headers={"X-Tenant": "b"},
                    json={"documents": [{"id": "secret", "text": source, "value": target_b}]})
    assert r.status_code == 200, r.text
    b = gen("b")
    assert b["text"] == target_b and voters(b) == {"secret"}  # b's own id, as b named it
    a = gen("a")  # a has no pair: nothing of b's votes, nor is b's count shown
    assert a["text"] != target_b and a["knn"]["keys"] == 0 and voters(a) == set()
    assert a["knn"]["mean_lambda"] == 0.0

    # a writes and deletes the same id in its own tenant: b's pair is untouched
    r = client.post(docs, headers={"X-Tenant": "a"},
                    json={"documents": [{"id": "secret", "text": source, "value": target_a}]})
    assert r.status_code == 200, r.text
    assert gen("a")["text"] == target_a and gen("b")["text"] == target_b
    r = client.request("DELETE", docs, json={"ids": ["secret"]}, headers={"X-Tenant": "a"})
    assert r.status_code == 200, r.text
    assert gen("a")["knn"]["keys"] == 0
    assert gen("b")["text"] == target_b

    again = make_client(**settings)  # and so after a restart, from the changes on disk
    assert gen("b", again)["text"] == target_b and gen("a", again)["knn"]["keys"] == 0
    again.delete("/v1/collections/tm_mt")
