"""Read retrieval datasets in the BEIR folder format.

A BEIR dataset folder holds::

    corpus.jsonl      one {"_id", "title", "text", ...} object per line (or corpus.jsonl.gz)
    queries.jsonl     one {"_id", "text", ...} object per line (or queries.jsonl.gz)
    qrels/<split>.tsv header row, then query-id <TAB> corpus-id <TAB> integer score

The loader follows BEIR's ``GenericDataLoader``: the corpus keeps ``title`` and ``text``,
queries are restricted to those judged in the split, and qrels keep every row (grade 0 too).
Unlike BEIR it fails loudly, naming the file and line, instead of carrying on with a silently
wrong dataset.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxemb_core.errors import DataFormatError

__all__ = ["BeirDataset", "document_text", "load_beir", "load_jsonl_corpus"]


@dataclass(frozen=True)
class BeirDataset:
    """One split of a BEIR dataset.

    Attributes:
        corpus: ``{doc_id: {"title": str, "text": str}}`` (title ``""`` when absent).
        queries: ``{query_id: text}``, only queries with at least one qrels row in the split.
        qrels: ``{query_id: {doc_id: grade}}``.
    """

    # repr=False: the default repr would print the whole corpus.
    corpus: dict[str, dict[str, str]] = field(repr=False)
    queries: dict[str, str] = field(repr=False)
    qrels: dict[str, dict[str, int]] = field(repr=False)

    def __repr__(self) -> str:
        n_judgements = sum(len(j) for j in self.qrels.values())
        return (
            f"BeirDataset(docs={len(self.corpus)}, queries={len(self.queries)}, "
            f"judgements={n_judgements})"
        )


def document_text(doc: Mapping[str, Any]) -> str:
    """The text BEIR and MTEB embed for a corpus document: ``title + " " + text``, stripped.

    This is the exact expression of BEIR's and MTEB's dense-retrieval encoders, so an empty or
    missing title gives just the stripped text.

    Args:
        doc: a mapping with ``"text"`` and optionally ``"title"``.

    Returns:
        The text to embed.

    Raises:
        DataFormatError: ``text`` is missing or not a string, or ``title`` is not a string.
    """
    text = doc.get("text")
    if not isinstance(text, str):
        raise DataFormatError(f"document has no string 'text' field: {_preview(doc)}")
    title = doc.get("title")
    if title is None:
        return text.strip()
    if not isinstance(title, str):
        raise DataFormatError(f"document 'title' is not a string: {_preview(doc)}")
    return (title + " " + text).strip()


def load_jsonl_corpus(path: str | Path) -> dict[str, dict[str, str]]:
    """Read a JSONL corpus of ``{"_id", "title", "text"}`` objects, plain or gzip-compressed.

    Args:
        path: the file; a name ending in ``.gz`` is read as gzip.

    Returns:
        ``{doc_id: {"title": str, "text": str}}`` in file order. A missing or ``null`` title
        becomes ``""``; other fields (``metadata``) are dropped. Numeric ids become strings.

    Raises:
        DataFormatError: the file is missing or unreadable, a line is not a JSON object, an
            ``_id`` is missing or repeated, or ``text``/``title`` is not a string. The message
            names the file and the 1-based line number.
    """
    path = Path(path)
    corpus: dict[str, dict[str, str]] = {}
    for lineno, obj in _iter_jsonl(path):
        doc_id = _get_id(obj, path, lineno)
        text = obj.get("text")
        if not isinstance(text, str):
            raise DataFormatError(f"{path}:{lineno}: document {doc_id!r} has no string 'text'")
        title = obj.get("title")
        if title is None:
            title = ""
        elif not isinstance(title, str):
            raise DataFormatError(f"{path}:{lineno}: document {doc_id!r} has a non-string 'title'")
        if doc_id in corpus:
            # BEIR would keep the last one silently; two documents under one id make every
            # judgement on that id ambiguous.
            raise DataFormatError(f"{path}:{lineno}: duplicate document id {doc_id!r}")
        corpus[doc_id] = {"title": title, "text": text}
    return corpus


def load_beir(folder: str | Path, split: str = "test") -> BeirDataset:
    """Load one split of a BEIR-format dataset folder.

    Args:
        folder: the dataset folder (holding ``corpus.jsonl[.gz]``, ``queries.jsonl[.gz]`` and
            ``qrels/``).
        split: the qrels split to read, ``qrels/{split}.tsv``.

    Returns:
        The dataset, with queries restricted to those judged in the split.

    Raises:
        DataFormatError: a file is missing (the message names the path), malformed (the
            message names file and line), or the qrels judge a query absent from the queries
            file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DataFormatError(f"BEIR dataset folder not found: {folder}")
    corpus = load_jsonl_corpus(_find_jsonl(folder, "corpus"))
    queries_path = _find_jsonl(folder, "queries")
    all_queries = _load_queries(queries_path)
    qrels_path = folder / "qrels" / f"{split}.tsv"
    qrels = _load_qrels(qrels_path)

    missing = [q for q in qrels if q not in all_queries]
    if missing:
        raise DataFormatError(
            f"{qrels_path}: {len(missing)} judged query id(s) not in {queries_path}, "
            f"e.g. {missing[:5]}"
        )
    # As BEIR: evaluate only the queries that the split judges, in qrels order.
    queries = {q: all_queries[q] for q in qrels}
    return BeirDataset(corpus=corpus, queries=queries, qrels=qrels)


# --------------------------------------------------------------------------------------------
# Internals
# --------------------------------------------------------------------------------------------


def _preview(obj: object, limit: int = 120) -> str:
    text = repr(obj)
    return text if len(text) <= limit else text[:limit] + "..."


def _find_jsonl(folder: Path, stem: str) -> Path:
    # Prefer the plain file when both exist: it is the one a user edits by hand.
    for name in (f"{stem}.jsonl", f"{stem}.jsonl.gz"):
        candidate = folder / name
        if candidate.is_file():
            return candidate
    raise DataFormatError(f"missing file: {folder / (stem + '.jsonl')} (or {stem}.jsonl.gz)")


def _open_text(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(1-based line number, line)`` with line ends removed, turning I/O errors into
    :class:`DataFormatError` that name the file (and line, when known)."""
    if not path.is_file():
        raise DataFormatError(f"missing file: {path}")
    lineno = 0
    try:
        # newline="\n": only "\n" ends a record (as json.dumps output and BEIR's files do), so a
        # stray "\r" inside a field cannot split a line in two; a CRLF's "\r" is stripped below.
        with (
            gzip.open(path, "rt", encoding="utf-8", newline="\n")
            if path.name.endswith(".gz")
            else open(path, encoding="utf-8", newline="\n")
        ) as fh:
            for lineno, line in enumerate(fh, start=1):
                yield lineno, line.rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{path}:{lineno + 1}: not valid UTF-8 ({exc.reason})") from exc
    except (OSError, EOFError, zlib.error) as exc:
        # gzip raises BadGzipFile (an OSError), EOFError on truncation, zlib.error on corruption.
        raise DataFormatError(f"{path}: cannot read file: {exc}") from exc


def _iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in _open_text(path):
        if not line.strip():
            continue  # a trailing blank line is common and harmless
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            # Some of json's messages end in "at" ("Unterminated string starting at").
            what = exc.msg.removesuffix(" at")
            raise DataFormatError(
                f"{path}:{lineno}: invalid JSON ({what} at column {exc.colno})"
            ) from None
        if not isinstance(obj, dict):
            raise DataFormatError(
                f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}"
            )
        yield lineno, obj


def _get_id(obj: Mapping[str, Any], path: Path, lineno: int) -> str:
    # BEIR writes "_id"; many other exports write "id". Either is read; a line carrying both
    # must carry one id, or which of its two documents was meant cannot be told.
    key = "_id" if "_id" in obj or "id" not in obj else "id"
    doc_id = _one_id(obj.get(key), key, path, lineno)
    if key == "_id" and "id" in obj:
        other = _one_id(obj["id"], "id", path, lineno)
        if other != doc_id:
            raise DataFormatError(
                f"{path}:{lineno}: the line names two ids, '_id' {doc_id!r} and 'id' {other!r}; "
                "keep one of the two fields"
            )
    return doc_id


def _one_id(raw: Any, key: str, path: Path, lineno: int) -> str:
    # Some exports write numeric ids; qrels ids are always read as strings, so normalise.
    if isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw)
    if not isinstance(raw, str) or not raw:
        raise DataFormatError(
            f"{path}:{lineno}: missing or invalid {key!r} (got {raw!r}); each line needs an "
            "'_id' (or 'id') string"
        )
    return raw


def _load_queries(path: Path) -> dict[str, str]:
    queries: dict[str, str] = {}
    for lineno, obj in _iter_jsonl(path):
        qid = _get_id(obj, path, lineno)
        text = obj.get("text")
        if not isinstance(text, str):
            raise DataFormatError(f"{path}:{lineno}: query {qid!r} has no string 'text'")
        if qid in queries:
            raise DataFormatError(f"{path}:{lineno}: duplicate query id {qid!r}")
        queries[qid] = text
    return queries


def _parse_grade(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def _load_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for lineno, line in _open_text(path):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != 3:
            raise DataFormatError(
                f"{path}:{lineno}: expected 3 tab-separated columns "
                f"(query-id, corpus-id, score), got {len(cols)}: {_preview(line)}"
            )
        qid, doc_id, raw_grade = (c.strip() for c in cols)
        grade = _parse_grade(raw_grade)
        if grade is None:
            if lineno == 1:
                # The header row ("query-id corpus-id score"). BEIR drops line 1 blindly; we
                # recognise it by its non-integer score so a header-less file loses nothing.
                continue
            raise DataFormatError(f"{path}:{lineno}: score {raw_grade!r} is not an integer")
        if not qid or not doc_id:
            raise DataFormatError(f"{path}:{lineno}: empty query-id or corpus-id")
        judged = qrels.setdefault(qid, {})
        if doc_id in judged and judged[doc_id] != grade:
            raise DataFormatError(
                f"{path}:{lineno}: conflicting grades for ({qid!r}, {doc_id!r}): "
                f"{judged[doc_id]} and {grade}"
            )
        judged[doc_id] = grade
    if not qrels:
        raise DataFormatError(f"{path}: no judgements found")
    return qrels
