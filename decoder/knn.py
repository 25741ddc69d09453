"""Token memory: kNN-MT (Khandelwal et al., ICLR 2021, "Nearest Neighbor Machine
Translation") with a distance-adaptive λ (SK-MT: Dai et al., ACL 2023, "SK-MT: A Simple and
Scalable kNN-MT").

A datastore of (the decoder's output state at each target position → the target token it
predicts), made by running the decoder teacher-forced over translation pairs
(:func:`collect_keys`). At each generation step the ``k`` nearest states vote::

    p_kNN(y) = Σᵢ softmax(−dᵢ / T)ᵢ · 1[vᵢ = y]        dᵢ: squared L2 distance to key i
    λ = λ_max · max(0, 1 − d₀ / R)                      d₀: the nearest key's distance
    p(y) = λ · p_kNN(y) + (1 − λ) · p_model(y)

so a memory with nothing within reach R (d₀ ≥ R) leaves the model's distribution as it is
(SK-MT ties R to T; a separate R let the memory weigh more on the dev split).

Keys are stored as product-quantisation codes in a FAISS IVF index (``IVF{nlist},PQ{m}``:
``m`` bytes a key) once there are enough of them to train it, exactly (``Flat``) below
that; values as int32 token ids, with the memory row (pair) each key came from, so that a
generation can say which pairs voted. A memory records the decoder it was built with: its
states mean nothing to another one (:class:`MemoryMismatchError`). FAISS is imported only
here, when a memory is built or read.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from decoder import batch as batching
from decoder.tokenizer import encode, token_strings

FLAT_BELOW = 20_000  # keys: exact search below this, IVF-PQ from here on
PQ_M = 64  # bytes a key in IVF-PQ
TRAIN_SAMPLE = 100_000  # keys the IVF-PQ quantisers are trained on


class MemoryMismatchError(ValueError):
    """A token memory built with another decoder than the one it is used with."""


def _faiss() -> Any:
    import faiss

    return faiss


@dataclass
class TokenMemory:
    """Keys in a FAISS index (row i = key i), ``values`` (n,) int32 next-token ids,
    ``rows`` (n,) int32 the memory row (pair) of each key, and ``meta`` (the decoder's
    name and fingerprint, the index layout, counts)."""

    index: Any
    values: np.ndarray
    rows: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None  # where it was read from: changes are appended there
    dead: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # per pair row
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # per tenant: (the change count it was made at, the bitmap of its live keys, FAISS's
    # selector over it); a change makes them stale
    _changes: int = field(default=0, repr=False)
    _only: dict[str, tuple[int, np.ndarray, Any]] = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        return int(self.values.shape[0])

    @property
    def ids(self) -> list[str]:
        """Pair ids by row (row numbers when it was built without ids)."""
        if "ids" not in self.meta:
            self.meta["ids"] = [str(r) for r in range(int(self.meta.get("pairs") or (
                int(self.rows.max()) + 1 if self.size else 0)))]
        ids: list[str] = self.meta["ids"]
        if len(self.dead) < len(ids):
            self.dead = np.concatenate([self.dead, np.zeros(len(ids) - len(self.dead), bool)])
        return ids

    def remove_pairs(self, pair_ids: Sequence[str]) -> int:
        """Pairs deleted from the translation memory: their tokens no longer vote (their
        keys stay in the index, masked). Returns the pairs found."""
        with self.lock:
            return self._remove(set(pair_ids))

    def _remove(self, gone: set[str]) -> int:
        ids = self.ids
        rows = [r for r, i in enumerate(ids) if i in gone and not self.dead[r]]
        self.dead[rows] = True
        self._changes += 1
        return len(rows)

    def add_pairs(self, keys: np.ndarray, values: np.ndarray, local_rows: np.ndarray,
                  pair_ids: Sequence[str]) -> None:
        """Pairs added to (or replaced in) the translation memory: ``local_rows`` index
        ``pair_ids``; an id the memory has already is replaced (its old tokens masked)."""
        with self.lock:
            self._remove(set(pair_ids))
            base = len(self.ids)
            self.meta["ids"] = self.ids + [str(i) for i in pair_ids]
            self.ids  # noqa: B018 (grows ``dead`` with them)
            self.index.add(np.ascontiguousarray(keys, dtype=np.float32))
            self.values = np.concatenate([self.values, np.asarray(values, np.int32)])
            self.rows = np.concatenate([self.rows, np.asarray(local_rows, np.int32) + base])
            self._changes += 1

    def append_change(self, keys: np.ndarray, values: np.ndarray, local_rows: np.ndarray,
                      pair_ids: Sequence[str], removed: Sequence[str]) -> None:
        """Apply a change (``removed`` pairs, then added ones) and, when the memory was
        read from a directory, append it there (``changes/N.npz``, written whole before
        it is named): :meth:`load` applies them in order, so it survives a restart."""
        if removed:
            self.remove_pairs(removed)
        if len(pair_ids):
            self.add_pairs(keys, values, local_rows, pair_ids)
        if self.path is None:
            return
        changes = self.path / "changes"
        changes.mkdir(exist_ok=True)
        with self.lock:
            n = len(list(changes.glob("*.npz")))
            tmp = changes / f"{n:06d}.tmp.npz"
            np.savez(tmp, keys=np.asarray(keys, np.float16), values=values,
                     rows=local_rows, ids=np.array(list(pair_ids), dtype=str),
                     removed=np.array(list(removed), dtype=str))
            os.replace(tmp, changes / f"{n:06d}.npz")

    @classmethod
    def build(cls, keys: np.ndarray, values: np.ndarray, rows: np.ndarray, decoder_name: str,
              decoder_fingerprint: str, nlist: int | None = None, pq_m: int = PQ_M,
              seed: int = 0) -> TokenMemory:
        """A memory of ``keys`` (n, d); IVF-PQ (``nlist`` lists, default ≈ 4·√n) from
        :data:`FLAT_BELOW` keys on, exact below."""
        faiss = _faiss()
        x = np.asarray(keys)  # float16 stays so: added a chunk at a time, in float32
        n, d = x.shape
        if n < FLAT_BELOW:
            layout = "Flat"
            index = faiss.IndexFlatL2(d)
        else:
            nlist = nlist or int(min(4096, max(64, 4 * np.sqrt(n))))
            layout = f"IVF{nlist},PQ{pq_m}"
            index = faiss.index_factory(d, layout)
            rng = np.random.default_rng(seed)
            sample = x[rng.choice(n, min(n, TRAIN_SAMPLE), replace=False)]
            index.train(np.ascontiguousarray(sample, dtype=np.float32))
        for start in range(0, n, 65_536):  # a 491k-key memory never whole in float32
            index.add(np.ascontiguousarray(x[start:start + 65_536], dtype=np.float32))
        meta = {"decoder": decoder_name, "decoder_fingerprint": decoder_fingerprint,
                "layout": layout, "dim": d}
        return cls(index, np.asarray(values, np.int32), np.asarray(rows, np.int32), meta)

    def search(self, q: np.ndarray, k: int, nprobe: int = 8, tenant: str | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """(squared distances (R, k), key rows (R, k), -1 where fewer than k exist). Safe
        from several threads at once (``nprobe`` goes with the call, not the index).

        ``tenant``: the memory of a multi-tenant collection, whose pairs are stored under
        ``tenant:id`` (:func:`index.tenancy.stored_id`): only that tenant's keys are
        searched (FAISS skips the others), so no other tenant's tokens ever vote."""
        x = np.ascontiguousarray(q, dtype=np.float32)
        with self.lock:
            if tenant is not None:
                bits, sel = self._tenant_keys(tenant)
                if not bits.any():  # nothing of this tenant's: no voter
                    return (np.full((len(x), k), np.inf, np.float32),
                            np.full((len(x), k), -1, np.int64))
                return self.index.search(x, k, params=self._params(nprobe, sel))
            dead = self.dead.any()
            deep = 2 * k + 16 if dead else k  # removed pairs' keys come first, then are cut
            d, i = self.index.search(x, deep, params=self._params(nprobe))
            if dead:  # removed pairs' tokens: as if absent
                gone = (i >= 0) & self.dead[self.rows[np.maximum(i, 0)]]
                i = np.where(gone, -1, i)
                d = np.where(gone, np.float32(np.inf), d)
                order = np.argsort(d, axis=1, kind="stable")
                d = np.take_along_axis(d, order, 1)[:, :k]
                i = np.take_along_axis(i, order, 1)[:, :k]
        return d, i

    def _params(self, nprobe: int, sel: Any = None) -> Any:
        """FAISS's search parameters: ``nprobe`` lists for IVF, and the keys ``sel`` lets
        through (None: every key)."""
        if hasattr(self.index, "nprobe"):
            return _faiss().SearchParametersIVF(nprobe=nprobe, sel=sel)
        return _faiss().SearchParameters(sel=sel)

    def keys_of(self, tenant: str | None) -> int:
        """The keys that may vote for ``tenant`` (None: every key the memory holds)."""
        if tenant is None:
            return self.size
        with self.lock:
            bits, _ = self._tenant_keys(tenant)
            return int(np.unpackbits(bits).sum())

    def _tenant_keys(self, tenant: str) -> tuple[np.ndarray, Any]:
        """The live keys of ``tenant``'s pairs as a bitmap (bit i = key i) and the FAISS
        selector reading it, made once per change of the memory (under ``lock``)."""
        cached = self._only.get(tenant)
        if cached is not None and cached[0] == self._changes:
            return cached[1], cached[2]
        prefix = f"{tenant}:"
        own = np.fromiter((i.startswith(prefix) for i in self.ids), bool, len(self.ids))
        live = (own & ~self.dead[:len(own)])[self.rows] if self.size else np.zeros(0, bool)
        bits = np.packbits(live, bitorder="little")
        faiss = _faiss()
        sel = faiss.IDSelectorBitmap(len(live), faiss.swig_ptr(bits)) if live.any() else None
        self._only[tenant] = (self._changes, bits, sel)  # bits outlive the selector
        return bits, sel

    def pair_id(self, key: int, tenant: str | None = None) -> str:
        """The id of the pair key ``key`` came from (its row number without ``ids``); with
        ``tenant``, the tenant's own id (the stored one less ``tenant:``)."""
        row = int(self.rows[key])
        ids = self.meta.get("ids")
        pair = str(ids[row]) if ids else str(row)
        return pair.removeprefix(f"{tenant}:") if tenant is not None else pair

    def check(self, decoder_fingerprint: str) -> None:
        if self.meta.get("decoder_fingerprint") != decoder_fingerprint:
            raise MemoryMismatchError(
                f"this token memory was built with decoder {self.meta.get('decoder')} "
                f"(fingerprint {self.meta.get('decoder_fingerprint')}), not "
                f"{decoder_fingerprint}: build it again with this decoder")

    def save(self, path: str | Path) -> Path:
        """Write the memory to the directory ``path`` (replaced whole, never half-written)."""
        out = Path(path)
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        _faiss().write_index(self.index, str(tmp / "keys.faiss"))
        np.savez(tmp / "values.npz", values=self.values, rows=self.rows)
        if self.dead.any():
            raise ValueError("save a memory with removed pairs by building it again")
        meta = {**self.meta, "keys": self.size}
        (tmp / "memory.json").write_text(json.dumps(meta, indent=2) + "\n")
        if out.exists():
            old = out.with_name(out.name + ".old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
        return out

    @classmethod
    def load(cls, path: str | Path, decoder_fingerprint: str | None = None) -> TokenMemory:
        """Read a memory written by :meth:`save`; with ``decoder_fingerprint``, refuse
        (:class:`MemoryMismatchError`) one built with another decoder."""
        p = Path(path)
        meta = json.loads((p / "memory.json").read_text())
        with np.load(p / "values.npz") as f:
            values, rows = f["values"], f["rows"]
        memory = cls(_faiss().read_index(str(p / "keys.faiss")), values, rows, meta)
        if memory.index.ntotal != memory.size:
            raise ValueError(f"{p}: {memory.index.ntotal} keys but {memory.size} values")
        if decoder_fingerprint is not None:
            memory.check(decoder_fingerprint)
        for change in sorted((p / "changes").glob("[0-9]*[0-9].npz")):
            with np.load(change) as f:
                memory.remove_pairs([str(i) for i in f["removed"]])
                if len(f["ids"]):
                    memory.add_pairs(f["keys"], f["values"], f["rows"],
                                     [str(i) for i in f["ids"]])
        memory.path = p
        return memory


@dataclass
class KnnOptions:
    """How a generation uses a token memory: ``k`` neighbours per step, distance
    temperature ``temperature`` (squared L2 units of the decoder's states), ``lam`` the
    most weight the memory gets, scaled down by the nearest key's distance over ``reach``
    when ``adaptive``; ``nprobe`` IVF lists searched."""

    k: int = 8
    temperature: float = 10.0
    lam: float = 0.35
    adaptive: bool = True
    nprobe: int = 8
    reach: float = 400.0

    def check(self) -> None:
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"knn lambda must be in [0, 1], got {self.lam}")
        if not self.temperature > 0:
            raise ValueError(f"knn temperature must be > 0, got {self.temperature}")
        if not self.reach > 0:
            raise ValueError(f"knn reach must be > 0, got {self.reach}")
        if not 1 <= self.k <= 1024:
            raise ValueError(f"knn k must be in [1, 1024], got {self.k}")


def vote_weights(d: np.ndarray, i: np.ndarray, o: KnnOptions
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Of a search's (distances, keys) (R, k): each voter's weight softmax(−d / T) over
    the keys found (0 where none: key -1), and each row's λ (0 for a row without keys;
    scaled by 1 − d₀ / reach when adaptive)."""
    valid = i >= 0
    logits = np.where(valid, -d.astype(np.float64) / o.temperature, -np.inf)
    top = logits.max(axis=1, keepdims=True)
    e = np.where(valid, np.exp(logits - np.where(np.isfinite(top), top, 0.0)), 0.0)
    w = e / np.maximum(e.sum(axis=1, keepdims=True), 1e-300)
    lam = np.full(len(d), o.lam) * valid.any(axis=1)
    if o.adaptive:
        lam = lam * np.clip(1.0 - np.where(valid[:, 0], d[:, 0], np.inf) / o.reach, 0.0, 1.0)
    return w.astype(np.float32), lam.astype(np.float32)


class KnnMixer:
    """The :class:`decoder.search.Mixer` of a token memory (see the module docstring);
    ``steps`` counts the rows searched, ``lam_sum`` the λ given them (mean λ = the ratio)."""

    def __init__(self, memory: TokenMemory, options: KnnOptions,
                 tenant: str | None = None) -> None:
        options.check()
        self.memory, self.o, self.tenant = memory, options, tenant
        self.steps, self.lam_sum = 0, 0.0

    def __call__(self, states: torch.Tensor, lp: torch.Tensor) -> torch.Tensor:
        d, i = self.memory.search(states.float().cpu().numpy(), self.o.k, self.o.nprobe,
                                  self.tenant)
        w_np, lam_np = vote_weights(d, i, self.o)
        vals = torch.from_numpy(self.memory.values[np.maximum(i, 0)]).to(lp.device).long()
        p_knn = torch.zeros_like(lp).scatter_add_(1, vals, torch.from_numpy(w_np).to(lp))
        self.steps += len(lam_np)
        self.lam_sum += float(lam_np.sum())
        lam = torch.from_numpy(lam_np).to(lp).unsqueeze(1)
        return torch.log(lam * p_knn + (1.0 - lam) * lp.exp())


def _states(dec: Any, src_ids: Sequence[list[int]], tgt_ids: Sequence[list[int]],
            neighbours: Sequence[Sequence[tuple[str, float]]] | None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced output states (B, T, d) float32 on the CPU of target token ids given
    source ids (and neighbours), and the target outputs ``y </s>`` (B, T), padded."""
    from encoder.device import autocast

    c = dec.config
    src = batching.sources(src_ids, c).to(dec.device)
    n_t = n_w = None
    if neighbours is not None and any(neighbours):
        n_ids = [encode(dec.tokenizer, [v for v, _ in n], c.max_tokens)[0] if n else []
                 for n in neighbours]
        n_t, n_w = batching.neighbours(n_ids, [[w for _, w in n] for n in neighbours], c)
    tgt_in, tgt_out = batching.targets(tgt_ids, c)
    with torch.inference_mode(), autocast(dec.device):
        memory = dec.model.encode_memory(
            src, None if n_t is None else n_t.to(dec.device),
            None if n_w is None else n_w.to(dec.device))
        states = dec.model.states(tgt_in.to(dec.device), memory)
    return states.float().cpu(), tgt_out


def collect_keys(dec: Any, sources: Sequence[str], targets: Sequence[str],
                 neighbours: Sequence[Sequence[tuple[str, float]]] | None = None,
                 batch_size: int = 64, progress: bool = False
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The decoder ``dec`` (:class:`decoder.Decoder`) teacher-forced over the pairs: per
    target token (``</s>`` included) the output state before it (float16 (n, d)), the token
    (int32 (n,)) and the pair's row (int32 (n,)). ``neighbours`` (per pair, (value,
    weight)) are what a retrieval-augmented decoder reads, as when it generates."""
    c = dec.config
    src_ids, _ = encode(dec.tokenizer, list(sources), c.max_tokens)
    tgt_ids, _ = encode(dec.tokenizer, list(targets), c.max_tokens)
    keys, values, rows = [], [], []
    order = sorted(range(len(sources)), key=lambda i: -len(tgt_ids[i]))
    for start in tqdm(range(0, len(order), batch_size), disable=not progress, desc="keys",
                      mininterval=2):
        idx = order[start:start + batch_size]
        states, tgt_out = _states(dec, [src_ids[i] for i in idx], [tgt_ids[i] for i in idx],
                                  None if neighbours is None else [neighbours[i] for i in idx])
        real = tgt_out != c.pad_id  # (B, T)
        keys.append(states[real].numpy().astype(np.float16))
        values.append(tgt_out[real].numpy().astype(np.int32))
        rows.append(np.repeat(np.asarray(idx, np.int32), real.sum(dim=1).numpy()))
    d = c.d_model
    return (np.concatenate(keys) if keys else np.zeros((0, d), np.float16),
            np.concatenate(values) if values else np.zeros(0, np.int32),
            np.concatenate(rows) if rows else np.zeros(0, np.int32))


def votes(dec: Any, source: str, neighbours: Sequence[tuple[str, float]], ids: list[int],
          memory: TokenMemory, options: KnnOptions, top: int = 4,
          tenant: str | None = None) -> list[dict[str, Any]]:
    """Which memory tokens voted for each token of a generated output (its ``ids``, then
    ``</s>``), as the generation saw them: the output teacher-forced gives the very
    states each step searched with. Per token: its λ, the memory's probability of it, and
    the ``top`` heaviest voters (pair id, token, weight); with ``tenant``, only that
    tenant's pairs vote and are named (by the tenant's own ids)."""
    c = dec.config
    src_ids, _ = encode(dec.tokenizer, [source], c.max_tokens)
    states, tgt_out = _states(dec, src_ids, [ids], [list(neighbours)] if neighbours else None)
    n = len(ids) + 1
    d_np, i_np = memory.search(states[0, :n].numpy(), options.k, options.nprobe, tenant)
    w_all, lam_all = vote_weights(d_np, i_np, options)  # as the mixer weighed them
    out = []
    for t in range(n):
        valid = i_np[t] >= 0
        w, keys = w_all[t][valid], i_np[t][valid]
        token = int(tgt_out[0, t])
        vals = memory.values[keys]
        order = np.argsort(-w, kind="stable")[:top]
        shown = token_strings(dec.tokenizer, [token, *(int(vals[j]) for j in order)])
        out.append({
            "token": shown[0],
            "lambda": round(float(lam_all[t]), 4),
            "p_memory": round(float(w[vals == token].sum()), 4),
            "votes": [{"id": memory.pair_id(int(keys[j]), tenant), "token": piece,
                       "weight": round(float(w[j]), 4)} for j, piece in zip(order, shown[1:],
                                                                             strict=True)]})
    return out
