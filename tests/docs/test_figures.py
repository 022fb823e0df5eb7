"""A figure the docs quote names the path it came from: the hybrid nDCG@10 through exact search
(``--via memory``) and through Chroma's HNSW index (``--via chroma``, eval's default) differ
(0.71714 and 0.71706), and a reader re-running the default command must find the one it gives."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _sentence_with(text: str, figure: str) -> str:
    flat = " ".join(text.split())
    (sentence,) = [s for s in re.split(r"(?<=\.)\s+(?=[A-Z(`])", flat) if figure in s]
    return sentence


def test_the_hybrid_page_says_which_path_gives_which_figure():
    page = (DOCS / "hybrid.md").read_text(encoding="utf-8")
    assert "`ctxemb eval --hybrid`" not in page  # the default --via is chroma: not the headline's
    assert "--via chroma --hybrid" in _sentence_with(page, "0.71706")
    assert "`ctxemb eval --via memory --hybrid` for the headline row" in page
    evaluation = (DOCS / "evaluation.md").read_text(encoding="utf-8")
    (line,) = [
        x for x in evaluation.splitlines() if x.startswith("ctxemb eval --via chroma --hybrid")
    ]
    assert "0.71706" in line and "--via memory: 0.71714" in line


def test_the_readme_says_which_path_gives_which_figure():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    sentence = _sentence_with(readme, "fused 0.71714")
    assert "exact dense search" in sentence and "--via memory --hybrid" in sentence
    assert "0.71706" in sentence and "--via chroma" in sentence
