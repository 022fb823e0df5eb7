"""A corpus as shards that workers read themselves: finding them, checking them, their rows.

A corpus is one JSONL(.gz) or Parquet file, a BEIR folder (its ``corpus.jsonl[.gz]``), or a
folder of ``*.jsonl`` / ``*.jsonl.gz`` or ``*.parquet`` shards. The driver checks every shard
once, streaming (ids unique across shards, every id and text one a tokenizer and a store can
take), before anything is written; the workers then read the shards and turn their rows into
``{"id", "text"}`` batches with the functions here. No Ray import: these run inside Ray tasks.
Public: part of the core surface adapters build on (``ctxemb_chroma``'s Ray indexing reads
corpora through it; "Adapters and the surface they use" in docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxemb_core.documents import text_digest
from ctxemb_core.errors import DataFormatError
from ctxemb_core.validate import check_text

__all__ = [
    "PARQUET_COLUMNS",
    "Shards",
    "checked_ids",
    "corpus_shards",
    "read_rows",
    "work_items",
]

#: The Parquet columns a corpus shard needs; ``title`` is optional.
PARQUET_COLUMNS = ("_id", "text")


@dataclass(frozen=True)
class Shards:
    """A corpus's files, all of one ``kind``: ``"jsonl"`` (plain or gzip) or ``"parquet"``."""

    kind: str
    files: tuple[Path, ...]

    @property
    def paths(self) -> list[str]:
        return [str(f) for f in self.files]


def corpus_shards(source: Path) -> Shards:
    """The shards of the corpus at ``source``.

    Raises:
        DataFormatError: nothing at ``source``, or a folder with no corpus file or shard.
    """
    if source.is_file():
        return Shards("parquet" if source.suffix == ".parquet" else "jsonl", (source,))
    if not source.is_dir():
        raise DataFormatError(f"no corpus at {source}: no such file or folder")
    parquet = sorted(source.glob("*.parquet"))
    if parquet:
        return Shards("parquet", tuple(parquet))
    beir = [source / n for n in ("corpus.jsonl", "corpus.jsonl.gz") if (source / n).is_file()]
    jsonl = beir[:1] or sorted([*source.glob("*.jsonl"), *source.glob("*.jsonl.gz")])
    if not jsonl:
        raise DataFormatError(
            f"{source} holds no corpus: a corpus.jsonl[.gz], *.jsonl[.gz] shards or "
            "*.parquet shards"
        )
    return Shards("jsonl", tuple(jsonl))


def checked_ids(shards: Shards) -> tuple[dict[str, str], list[int]]:
    """Every document id with the digest of its text (:func:`~ctxemb_core.documents.
    text_digest`, what a sync compares) and each shard's document count, after checking every
    shard (one at a time, so memory holds one shard and the digests).

    Raises:
        DataFormatError: a malformed line or row, a missing column, an id repeated within or
            across shards, a text no tokenizer can take, or no documents at all.
    """
    seen: dict[str, Path] = {}
    digests: dict[str, str] = {}
    counts = []
    for shard in shards.files:
        docs = _read_parquet(shard) if shards.kind == "parquet" else _read_jsonl(shard)
        counts.append(len(docs))
        for doc_id, text in docs.items():
            if doc_id in seen:
                raise DataFormatError(
                    f"{shard}: document id {doc_id!r} is also in {seen[doc_id]}; ids must be "
                    "unique across the corpus"
                )
            check_text(doc_id, f"{shard}: document id {doc_id!r}")
            check_text(text, f"{shard}: document {doc_id!r}")
            seen[doc_id] = shard
            digests[doc_id] = text_digest(text)
    if not seen:
        where = ", ".join(shards.paths)
        raise DataFormatError(
            f"{where} holds no documents; a corpus is one JSON object "
            '{"_id", "title", "text"} per line, or Parquet with _id, title, text columns'
        )
    return digests, counts


def work_items(
    shards: Shards, counts: list[int], workers: int, batch_size: int
) -> list[dict[str, Any]]:
    """Row ranges of the shards for the workers to read: whole shards when there are enough
    of them, else each shard cut in a few ranges of at least ``batch_size`` rows, so that even
    a corpus of one file feeds every worker (a range costs one more pass over its shard)."""
    per_shard = max(1, -(-2 * workers // max(len(shards.files), 1)))
    items = []
    for path, n in zip(shards.paths, counts, strict=True):
        step = max(batch_size, -(-n // per_shard))
        for start in range(0, n, step):
            items.append({"kind": shards.kind, "path": path, "start": start, "stop": start + step})
    return items


def read_rows(batch: dict[str, Any]) -> dict[str, Any]:
    """``{"id", "text"}`` of the row ranges in ``batch`` (items of :func:`work_items`): runs on
    a worker, which reads its shard itself."""
    ids: list[str] = []
    texts: list[str] = []
    for kind, path, start, stop in zip(
        batch["kind"], batch["path"], batch["start"], batch["stop"], strict=True
    ):
        rows = _parquet_range if kind == "parquet" else _jsonl_range
        for doc_id, text in rows(Path(path), int(start), int(stop)):
            ids.append(doc_id)
            texts.append(text)
    return {"id": np.array(ids, dtype=object), "text": np.array(texts, dtype=object)}


def _jsonl_range(path: Path, start: int, stop: int) -> Iterator[tuple[str, str]]:
    from ctxemb_core.eval.beir import _get_id, _iter_jsonl, document_text

    for k, (lineno, obj) in enumerate(_iter_jsonl(path)):
        if k >= stop:
            return
        if k >= start:
            yield _get_id(obj, path, lineno), document_text(obj)


def _parquet_range(path: Path, start: int, stop: int) -> Iterator[tuple[str, str]]:
    import pyarrow.parquet as pq

    from ctxemb_core.eval.beir import document_text

    table = pq.read_table(path)
    columns = [c for c in ("_id", "title", "text") if c in table.column_names]
    for row in table.select(columns).slice(start, stop - start).to_pylist():
        yield str(row["_id"]), document_text({"title": row.get("title") or "", "text": row["text"]})


def _read_jsonl(shard: Path) -> dict[str, str]:
    from ctxemb_core.eval.beir import document_text, load_jsonl_corpus

    return {i: document_text(doc) for i, doc in load_jsonl_corpus(shard).items()}


def _read_parquet(shard: Path) -> dict[str, str]:
    import pyarrow.parquet as pq

    from ctxemb_core.eval.beir import document_text

    try:
        table = pq.read_table(shard)
    except Exception as exc:  # pyarrow's errors share no base class worth naming
        raise DataFormatError(f"{shard}: not a readable Parquet file ({exc})") from None
    missing = set(PARQUET_COLUMNS) - set(table.column_names)
    if missing:
        raise DataFormatError(
            f"{shard}: Parquet corpus lacks column(s) {sorted(missing)}; it needs "
            "_id, text and optionally title"
        )
    docs: dict[str, str] = {}
    columns = [c for c in ("_id", "title", "text") if c in table.column_names]
    for row in table.select(columns).to_pylist():
        raw_id = row["_id"]
        if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or raw_id == "":
            raise DataFormatError(f"{shard}: missing or invalid '_id' (got {raw_id!r})")
        doc_id = str(raw_id)
        if doc_id in docs:
            raise DataFormatError(f"{shard}: duplicate document id {doc_id!r}")
        text = row["text"]
        if not isinstance(text, str):
            raise DataFormatError(f"{shard}: document {doc_id!r} has no string 'text'")
        docs[doc_id] = document_text({"title": row.get("title") or "", "text": text})
    return docs
