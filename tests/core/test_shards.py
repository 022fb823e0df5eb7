"""The row ranges the Ray workers read (ctxemb_core.shards), in-process.

tests/ray/test_ray.py runs the jobs on a real Ray instance; here, at no cost, every range
:func:`work_items` deals for one worker or several is read back by :func:`read_rows`, from gzip
JSONL and from Parquet shards (one without titles), and the ranges together are the corpus,
each document once, in its shard's order.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from ctxemb_core.eval.beir import document_text
from ctxemb_core.shards import checked_ids, corpus_shards, read_rows, work_items

DOCS = [{"_id": f"d{i}", "title": f"Title {i}", "text": f"Text number {i}."} for i in range(23)]
CUTS = (DOCS[:4], DOCS[4:15], DOCS[15:])


def _gz(folder: Path) -> Path:
    folder.mkdir()
    for k, part in enumerate(CUTS):
        with gzip.open(folder / f"part-{k}.jsonl.gz", "wt", encoding="utf-8") as f:
            f.writelines(json.dumps(d) + "\n" for d in part)
    return folder


def _parquet(folder: Path) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    folder.mkdir()
    for k, part in enumerate(CUTS):
        columns = ["_id", "title", "text"] if k else ["_id", "text"]  # the first: no titles
        table = pa.table({c: [d[c] for d in part] for c in columns})
        pq.write_table(table, folder / f"part-{k}.parquet")
    return folder


def _expected(kind: str) -> list[tuple[str, str]]:
    untitled = {d["_id"] for d in CUTS[0]} if kind == "parquet" else set()
    return [
        (d["_id"], d["text"].strip() if d["_id"] in untitled else document_text(d)) for d in DOCS
    ]


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
@pytest.mark.parametrize(("workers", "batch_size"), [(1, 16), (2, 3), (3, 1)])
def test_the_ranges_dealt_to_the_workers_read_back_the_corpus_once(
    tmp_path: Path, kind: str, workers: int, batch_size: int
) -> None:
    folder = (_gz if kind == "jsonl" else _parquet)(tmp_path / kind)
    shards = corpus_shards(folder)
    assert shards.kind == kind and len(shards.files) == 3
    _, counts = checked_ids(shards)
    assert counts == [len(c) for c in CUTS]
    items = work_items(shards, counts, workers, batch_size)
    # Three shards feed one worker whole; more workers get each shard cut in ranges.
    starts = [item["start"] for item in items]
    if workers == 1:
        assert starts == [0, 0, 0]
    else:
        assert len(items) > 3 and any(s > 0 for s in starts)  # ranges from inside a shard
    got: list[tuple[str, str]] = []
    for item in items:  # one range a batch, as the read stage runs (batch_size=1)
        rows = read_rows({key: [value] for key, value in item.items()})
        got += zip(rows["id"].tolist(), rows["text"].tolist(), strict=True)
    assert got == _expected(kind)
    # Several ranges in one batch read as those ranges one after the other.
    both = read_rows({key: [i[key] for i in items] for key in items[0]})
    assert list(zip(both["id"].tolist(), both["text"].tolist(), strict=True)) == got
