"""The demo corpus and queries ``ctxemb demo`` indexes and asks, shipped inside the package.

Read them through :func:`corpus_path` / :func:`queries_path` (``importlib.resources``), so the
demo works from an installed wheel in any directory, not only from the source checkout.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

__all__ = ["corpus_path", "queries_path"]


def _path(name: str) -> Path:
    # Installed wheels and editable installs both lay the files out on disk; a zipped install
    # (not produced by pip) would need importlib.resources.as_file, which the CLI does not use.
    return Path(str(files(__name__) / name))


def corpus_path() -> Path:
    """The demo corpus: 24 short documents, one ``{"_id", "text"}`` object per line."""
    return _path("corpus.jsonl")


def queries_path() -> Path:
    """The demo queries, one ``{"text"}`` object per line."""
    return _path("queries.jsonl")
