"""Result files: TREC run files for retrieval, a TSV of pair scores for STS.

A TREC run file has one line per retrieved document, ``qid Q0 docid rank score tag``, separated
by single spaces. trec_eval ignores the rank column and re-sorts each query by score (ties by
document id descending, see :mod:`ctxemb_core.eval.metrics`); :func:`write_run` writes the lines
in exactly that order with ranks 1, 2, ... so the file reads the same to a person and to
trec_eval. Scores are written with Python's shortest round-tripping ``repr``, so a run read back
scores exactly as the one written.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import SupportsFloat

import numpy as np

from ctxemb_core.errors import DataFormatError, InvalidInputError
from ctxemb_core.eval.beir import _open_text

__all__ = ["read_run", "write_pair_scores", "write_run"]


def _ordered(doc_scores: Mapping[str, SupportsFloat]) -> list[tuple[float, str]]:
    # trec_eval's order: score descending, then document id descending.
    return sorted(((float(s), d) for d, s in doc_scores.items()), reverse=True)


def _field(value: str, what: str) -> str:
    if not value or any(c.isspace() for c in value):
        raise InvalidInputError(
            f"{what} {value!r} cannot be written to a TREC run file: it is empty or holds "
            "whitespace (the file's columns are separated by spaces)"
        )
    return value


def write_run(
    run: Mapping[str, Mapping[str, SupportsFloat]],
    path: str | os.PathLike[str],
    *,
    tag: str = "ctxemb",
) -> int:
    """Write ``run`` as a TREC run file, queries in the run's order, documents ranked.

    Args:
        run: ``{query_id: {doc_id: score}}``.
        path: the file to write (replaced if it exists; its folder is created).
        tag: the run's name, the last column.

    Returns:
        How many lines were written.

    Raises:
        InvalidInputError: an id or the tag is empty or holds whitespace, or a score is not
            finite; nothing is written then.
    """
    _field(tag, "tag")
    lines: list[str] = []
    for qid, doc_scores in run.items():
        _field(qid, "query id")
        for rank, (score, doc_id) in enumerate(_ordered(doc_scores), start=1):
            if not math.isfinite(score):
                raise InvalidInputError(f"query {qid!r}, document {doc_id!r}: score {score}")
            lines.append(f"{qid} Q0 {_field(doc_id, 'document id')} {rank} {score!r} {tag}\n")
    _write_atomically(Path(path), "".join(lines))
    return len(lines)


def read_run(path: str | os.PathLike[str]) -> dict[str, dict[str, float]]:
    """Read a TREC run file into ``{query_id: {doc_id: score}}``.

    Any whitespace separates the six columns (trec_eval reads them so too); the rank and tag
    columns are read but not used, as trec_eval does not use them.

    Raises:
        DataFormatError: the file is missing or unreadable, a line has not six columns, a score
            is not a finite number, or a query lists a document twice (file and line named).
    """
    path = Path(path)
    run: dict[str, dict[str, float]] = {}
    for lineno, line in _open_text(path):
        cols = line.split()
        if not cols:
            continue
        if len(cols) != 6:
            raise DataFormatError(
                f"{path}:{lineno}: expected 6 columns (qid Q0 docid rank score tag), "
                f"got {len(cols)}"
            )
        qid, _, doc_id, _, raw, _ = cols
        try:
            score = float(raw)
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise DataFormatError(f"{path}:{lineno}: score {raw!r} is not a finite number")
        docs = run.setdefault(qid, {})
        if doc_id in docs:
            raise DataFormatError(f"{path}:{lineno}: query {qid!r} lists {doc_id!r} twice")
        docs[doc_id] = score
    return run


def write_pair_scores(
    path: str | os.PathLike[str],
    gold: Sequence[float] | np.ndarray,
    scores: Sequence[float] | np.ndarray,
    first: Sequence[str],
    second: Sequence[str],
) -> int:
    """Write STS pair scores as TSV: ``pair gold score sentence1 sentence2`` with a header.

    ``pair`` is the 0-based position of the pair in its file. Tabs and line breaks inside a
    sentence are written as spaces so every pair stays one row.

    Returns:
        How many pairs were written.

    Raises:
        InvalidInputError: the four columns differ in length.
    """
    n = len(gold)
    if not (len(scores) == len(first) == len(second) == n):
        raise InvalidInputError(
            f"gold, scores, first and second differ in length: {n}, {len(scores)}, "
            f"{len(first)}, {len(second)}"
        )
    rows = ["pair\tgold\tscore\tsentence1\tsentence2\n"]
    for i in range(n):
        a, b = _one_cell(first[i]), _one_cell(second[i])
        rows.append(f"{i}\t{float(gold[i])!r}\t{float(scores[i])!r}\t{a}\t{b}\n")
    _write_atomically(Path(path), "".join(rows))
    return n


def _one_cell(text: str) -> str:
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def _write_atomically(path: Path, text: str) -> None:
    # A reader (or a second run) never sees half a file: write beside it, then rename. Unlike
    # ctxemb_core._files.write_atomic (a cache, where failing only costs speed) a failure raises.
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
