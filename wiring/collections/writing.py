"""Writes and deletes with every side effect, the one path every writer takes (an upsert
request, a document file, the demo seeding, a delete by ids or by filter): refused while
the disk is full; into the copy too while an adapt job re-indexes the collection; the token
memory learns the pairs; the calibrator counts the writes. And documents read back: one by
id, or the collection page by page (:mod:`index.scroll`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from index import (
    CollectionInfo,
    CollectionNotFoundError,
    EncoderInfo,
    EncoderMismatchError,
    Item,
    softmax,
)
from index import passages as long_docs
from index.filters import parse_filter
from index.hybrid.fusion import DEFAULT_FUSION
from index.scroll import after_of, all_matching, cursor_of, page
from index.tenancy import check_tenant, stored_id
from wiring.collections.base import Base
from wiring.collections.requests import Document, Given
from wiring.encoders import Served
from wiring.errors import InvalidError, TooLargeError


def given_passages(given: Given | None, encoder: EncoderInfo, docs: Sequence[Document],
                   planned: long_docs.Planned) -> tuple[np.ndarray | None, list[int]]:
    """The planned passages' vectors that a writer's ``given`` ones (one a document) are:
    a document's, when their encoder is the collection's and the document is one passage
    embedded as its whole text (a short one); and the passage rows still to embed (all of
    them without ``given``)."""
    if given is None or given.encoder != encoder:
        return None, list(range(planned.rows()))
    last = {d.id: i for i, d in enumerate(docs)}  # as planned: the last of an id wins
    x = np.zeros((planned.rows(), given.vectors.shape[1]), np.float32)
    todo: list[int] = []
    row = 0
    for doc_id, text, ps in zip(planned.ids, planned.texts, planned.passages, strict=True):
        if len(ps) == 1 and ps[0].embed == text:
            x[row] = given.vectors[last[doc_id]]
        else:
            todo.extend(range(row, row + len(ps)))
        row += len(ps)
    return x, todo


class Writing(Base):
    """The write side of :class:`wiring.collections.Collections`."""

    async def upsert(self, name: str, docs: Sequence[Document], tenant: str | None = None,
                     truncate: bool = True) -> tuple[int, list[str]]:
        """An upsert request: at most ``max_documents`` documents, then :meth:`write`."""
        self.writable()
        if len(docs) > self.limits.max_documents:
            raise TooLargeError(f"{len(docs)} documents in one request; at most "
                                f"{self.limits.max_documents} (QKV_MAX_DOCUMENTS)")
        return await self.write(name, docs, tenant, truncate)

    async def write(self, name: str, docs: Sequence[Document], tenant: str | None = None,
                    truncate: bool = True, given: Given | None = None, counted: bool = True
                    ) -> tuple[int, list[str]]:
        """Embed (or take the ``given`` vectors where their encoder made the collection:
        for every document of a collection without passages, for each short one of a
        collection with them, :func:`given_passages`) and upsert ``docs`` (the last of
        duplicate ids wins) with every side effect: refused while the disk is full; into
        the copy too while an adapt job re-indexes the collection (and into the new
        collection when its swap comes between); the token memory learns the pairs; the
        calibrator counts the writes (not when ``counted`` is false: a writer that has the
        collection calibrated once at its end, the demo seeding). Returns the rows written
        and the ids whose text was cut."""
        self.writable()
        info = await self.describe(name)  # 404 before any encoding
        check_tenant(info, tenant)  # a ValueError: 422
        if info.passages:
            return await self._upsert_documents(name, info, docs, tenant, counted, given)
        for again in (False, True):
            model = self.encoder_of(info)  # a conflict when the encoder that made it is gone
            enc = self.info_for(info.dim, model)
            if given is not None and given.encoder == enc:
                vectors, cut = given.vectors, [False] * len(docs)
            else:
                emb = await self.embed([d.text for d in docs], truncate, dim=info.dim,
                                       model=model)
                vectors, cut = emb.vectors, emb.truncated
            items = [Item(d.id, vectors[i], d.text, d.value, d.metadata, tenant)
                     for i, d in enumerate(docs)]
            try:
                n: int = await self.call(self.store.upsert, name, items, enc)
                break
            except (CollectionNotFoundError, EncoderMismatchError):
                # an adapt job moved the name onto its new collection meanwhile: embed again
                # with that one's encoder and write there
                if again or not self.adapter.swapped_lately():
                    raise
                info = await self.describe(name)
        if self.adapter.shadow(info) is not None:  # being re-indexed: its copy too
            await self.call(self.adapter.mirror_upsert, info, items)
        await self._remember(name, info.name, docs, vectors, tenant, model=model)
        if counted:
            self.calibrator.wrote(info, n)  # calibrated in the background once grown enough
        return n, [d.id for d, c in zip(docs, cut, strict=True) if c]

    async def _upsert_documents(self, name: str, info: CollectionInfo,
                                docs: Sequence[Document], tenant: str | None, counted: bool,
                                given: Given | None = None) -> tuple[int, list[str]]:
        """Upsert into a collection with passages (:mod:`index.passages`): each document cut
        into passages, embedded (or ``given``, where they fit: :func:`given_passages`), and
        written whole (none is cut at the token limit)."""
        settings = long_docs.Settings.of(info.passages)
        assert settings is not None
        changed: list[tuple[list[Item], list[str]]] = []

        def note(rows: list[Item], gone: list[str]) -> None:
            changed[:] = [(rows, gone)]
        for again in (False, True):
            model = self.encoder_of(info)
            enc = self.info_for(info.dim, model)
            count = long_docs.token_counter(model.encoder.tokenizer)
            try:
                planned = await self.run(long_docs.plan, [(d.id, d.text, d.value, d.metadata)
                                                          for d in docs], settings, count, enc,
                                         info.hybrid)
            except OverflowError as e:
                raise TooLargeError(str(e)) from e
            except ValueError as e:
                raise InvalidError(str(e)) from e
            got, todo = given_passages(given, enc, docs, planned)
            vectors = np.zeros((planned.rows(), info.dim), np.float32) if got is None else got
            if todo:
                emb = await self.embed([planned.embed_texts[i] for i in todo], True,
                                       dim=info.dim, model=model)
                vectors[todo] = emb.vectors
            try:
                n: int = await self.call(long_docs.commit, self.store, name, planned,
                                         vectors, enc, tenant, note)
                break
            except (CollectionNotFoundError, EncoderMismatchError):
                if again or not self.adapter.swapped_lately():
                    raise
                info = await self.describe(name)
        if self.adapter.shadow(info) is not None and changed:  # being re-indexed: its copy too
            rows, gone = changed[0]
            await self.call(self.adapter.mirror_upsert, info, rows)
            if gone:
                await self.call(self.adapter.mirror_delete, info, gone)
        firsts = np.cumsum([0] + [len(x) for x in planned.passages[:-1]])
        kept = list({d.id: d for d in docs}.values())  # as planned: the last of an id wins
        await self._remember(name, info.name, kept, vectors[firsts], tenant, model=model)
        if counted:
            self.calibrator.wrote(info, n)
        return n, []

    async def upsert_file(self, name: str, filename: str, data: bytes,
                          tenant: str | None = None, doc_id: str | None = None) -> Document:
        """Upsert one document file (text, Markdown, HTML, PDF: its text read as ``qkv
        index`` reads it) as the document ``doc_id`` (default: ``filename``), its metadata
        naming the file and its format. A file without text is invalid."""
        from index.bulk.documents import text_of

        try:
            kind, text = await self.run(text_of, filename, data)
        except ValueError as e:
            raise InvalidError(f"file {filename!r}: {e}", "file") from e
        doc = Document(doc_id or filename, text, None, {"source": filename, "format": kind})
        await self.upsert(name, [doc], tenant)
        return doc

    async def delete(self, name: str, ids: Sequence[str], tenant: str | None = None) -> int:
        """Delete documents by id (the tenant's) with all their passages, from the copy an
        adapt job is making too, and their pairs from the token memory; returns the distinct
        ids asked for."""
        if len(ids) > self.limits.max_documents:
            raise TooLargeError(f"{len(ids)} ids in one request; at most "
                                f"{self.limits.max_documents} (QKV_MAX_DOCUMENTS)")
        info = await self.describe(name)
        rows = list(ids)
        if info.passages:
            rows = await self.call(long_docs.remove, self.store, name, ids, tenant)
        else:
            await self.call(self.store.delete, name, ids, tenant)
        if self.adapter.shadows:  # a collection being re-indexed by an adapt job: its copy too
            await self.call(self.adapter.mirror_delete, info, rows)
        if self.token_memories:  # the deleted pairs' tokens stop voting (the tenant's)
            stored = (await self.describe(name)).name
            await self._remember(name, stored, removed=list(ids), tenant=tenant)
        return len(set(ids))

    async def delete_where(self, name: str, filter: dict[str, Any], tenant: str | None = None
                           ) -> int:
        """Delete every document (the tenant's) that matches ``filter``, as :meth:`delete`
        deletes them, ``QKV_MAX_DOCUMENTS`` at a time; returns how many. Those that match
        when it starts are deleted (their ids read in one go; one written meanwhile is
        not)."""
        info = await self.describe(name)
        which = parse_filter(filter)
        ids = await self.call(all_matching, self.store, info, which, tenant)
        step = self.limits.max_documents
        done = 0
        for start in range(0, len(ids), step):
            done += await self.delete(name, ids[start:start + step], tenant)
        return done

    async def get(self, name: str, doc_id: str, tenant: str | None = None) -> Item | None:
        """The document ``doc_id`` (the tenant's), whole, or None."""
        info = await self.describe(name)
        if info.passages:
            found = await self.call(long_docs.read, self.store, name, doc_id, tenant)
            return found[0] if found else None
        items: list[Item] = await self.call(self.store.get, name, [doc_id], tenant)
        return items[0] if items else None

    async def scroll(self, name: str, cursor: str | None, limit: int,
                     filter: dict[str, Any] | None = None, tenant: str | None = None
                     ) -> tuple[list[Item], str | None]:
        """A page of the collection's documents (the tenant's) that match ``filter``,
        whole, in id order after ``cursor`` (None: from the first), and the cursor of the
        next page (None: this was the last)."""
        info = await self.describe(name)
        after = after_of(cursor)
        which = parse_filter(filter) if filter is not None else None
        items, last = await self.call(page, self.store, info, after, limit, which, tenant)
        return items, cursor_of(last)

    async def _remember(self, collection: str, stored: str, docs: Sequence[Document] = (),
                        vectors: np.ndarray | None = None, tenant: str | None = None,
                        removed: Sequence[str] = (), model: Served | None = None) -> None:
        """Documents just upserted into (``docs``, with their ``vectors``) or deleted from
        (``removed`` ids) a collection with a token memory: upserted pairs' tokens join it,
        deleted ones stop voting, and so do a document's without a value (no pair). A
        decoder that reads neighbours gets each new pair's nearest other pairs, as in
        training. In a multi-tenant collection the memory holds a pair under
        ``tenant:id``, as the store does, so a tenant's writes touch its own pairs only."""
        from wiring.token_memory import remember, trained_retrieval

        memory = self.token_memory_for(collection, stored)
        if memory is None:
            return
        dec = self.decoder_for(collection, stored)
        valued = [d for d in docs if d.value]
        pairs = [(stored_id(tenant, d.id), d.text, d.value or "") for d in valued]
        rows = [i for i, d in enumerate(docs) if d.value]
        removed = [stored_id(tenant, i) for i in (*removed, *(d.id for d in docs
                                                              if not d.value))]
        k, t = trained_retrieval(dec)
        nbrs = None
        if k > 0 and pairs and vectors is not None:
            found = await self.call(self.store.search, collection, vectors[rows], k + 1, None,
                                    self.info_for(vectors.shape[1], model), False, "Session",
                                    None, "dense", DEFAULT_FUSION, self.default_weight, tenant)
            nbrs = []
            for d, hits in zip(valued, found, strict=True):
                kept = [h for h in hits if h.id != d.id][:k]
                w = softmax(np.array([h.score for h in kept], np.float32), t)
                nbrs.append([(h.value or h.text or "", float(x))
                             for h, x in zip(kept, w, strict=True)])
        await self.run(remember, dec, memory, pairs, nbrs, removed)
