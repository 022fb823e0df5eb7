"""The modules split out of embedder.py and rerank/late.py: below their old homes, names kept.

The Embedder's two sources (issue 44, item 7), the network here and a server at a URL, sit
below it too, behind one protocol (``source``): the Embedder chooses one when it is built and
never asks again which it has, and a call's truncation count comes back with its vectors.

``networks`` (the loader and its cache), ``tokens`` (token and word vectors) and ``settings`` sit
below :mod:`ctxemb_core.embedder`; ``rerank.kernels`` (MaxSim) and ``rerank.token_store`` (the
token-vector files) sit below :mod:`ctxemb_core.rerank.late`. Every name the old modules gave
is still importable from them, as the same object.
"""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import numpy as np
import pytest

import ctxemb_core

_ROOT = Path(ctxemb_core.__file__).parent

# What a module split out of the Embedder may not reach: the Embedder and what builds on it.
_ABOVE_EMBEDDER = {
    "ctxemb_core",
    "ctxemb_core.embedder",
    "ctxemb_core.lazy",
    "ctxemb_core.guard",
    "ctxemb_core.stamp",
    "ctxemb_core.detect",
    "ctxemb_core.documents",
    "ctxemb_core.components",
    "ctxemb_core.cli",
    "ctxemb_core.export",
    "ctxemb_core.migrate",
}


def _imports(path: Path) -> set[str]:
    """Every module a file imports, inside functions too."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize(
    "name", ["networks", "tokens", "settings", "source", "local_source", "server_source"]
)
def test_the_loader_and_token_modules_import_nothing_above_the_embedder(name):
    imported = _imports(_ROOT / f"{name}.py")
    above = sorted(
        m
        for m in imported
        if m in _ABOVE_EMBEDDER or m.startswith(("ctxemb_core.rerank", "ctxemb_core.eval"))
    )
    assert above == [], f"{name}.py imports {above}"


@pytest.mark.parametrize(
    ("name", "forbidden"),
    [
        ("kernels", {"ctxemb_core.rerank.late", "ctxemb_core.rerank.token_store"}),
        ("token_store", {"ctxemb_core.rerank.late"}),
    ],
)
def test_the_late_interaction_parts_sit_below_the_reranker(name, forbidden):
    imported = _imports(_ROOT / "rerank" / f"{name}.py")
    assert not imported & (forbidden | {"ctxemb_core.embedder", "ctxemb_core.rerank"})


def test_the_old_modules_still_give_every_name_they_gave():
    from ctxemb_core import embedder, networks, tokens
    from ctxemb_core.rerank import kernels, late, token_store

    assert embedder.TokenEmbeddings is tokens.TokenEmbeddings
    assert embedder.WordVector is tokens.WordVector
    assert embedder._ENCODERS is networks._ENCODERS  # the one process-wide cache
    assert set(embedder.__all__) == {"Embedder", "TokenEmbeddings", "WordVector"}
    assert late.maxsim is kernels.maxsim and late.EMPTY_SCORE == kernels.EMPTY_SCORE
    assert late.TokenVectorStore is token_store.TokenVectorStore
    for private in ("_GATHER_BELOW", "_MLAS_MIN_FLOPS", "_matmul", "_mlas_session"):
        assert getattr(late, private) is getattr(kernels, private)
    assert set(late.__all__) == {
        "EMPTY_SCORE",
        "LateInteractionReranker",
        "TokenVectorStore",
        "maxsim",
    }
    import ctxemb_core.rerank as rerank

    assert rerank.maxsim is kernels.maxsim  # the function, not the kernels module
    assert rerank.TokenVectorStore is token_store.TokenVectorStore


def test_the_embedder_chooses_its_source_once():
    # Every method but the constructor (and the one refusal of what a server cannot give)
    # goes through the source; none asks again whether the embedder has a server.
    tree = ast.parse((_ROOT / "embedder.py").read_text(encoding="utf-8"))
    embedder = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Embedder")
    asking = sorted(
        method.name
        for method in embedder.body
        if isinstance(method, ast.FunctionDef) and method.name not in ("__init__", "_local")
        for node in ast.walk(method)
        if isinstance(node, ast.Attribute)
        and node.attr == "remote"
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )
    assert asking == []


def test_a_call_returns_its_own_truncation_count(minilm):
    from ctxemb_core.local_source import LocalSource
    from ctxemb_core.source import Encoded

    assert isinstance(minilm.source, LocalSource) and minilm.backend == minilm.source.backend
    long_text = " ".join(["word"] * 300)
    texts = ["short", long_text, "also short", long_text]
    done = minilm.embed_float_counted(texts, "document")
    assert isinstance(done, Encoded) and done.truncated == 2
    np.testing.assert_array_equal(done.vectors, minilm.embed_float(texts, "document", warn=False))
    # Shared between threads, each call's count is its own, whichever finished last.
    counts: dict[str, list[int]] = {"long": [], "short": []}

    def run(kind: str, batch: list[str]) -> None:
        for _ in range(2):
            counts[kind].append(minilm.embed_float_counted(batch, "query").truncated)

    threads = [
        threading.Thread(target=run, args=("long", [long_text] * 3)),
        threading.Thread(target=run, args=("short", ["a", "b", "c"])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts == {"long": [3] * 2, "short": [0] * 2}
    # The documented attribute still says what the last call cut.
    minilm.embed_float_counted([long_text], "query")
    assert minilm.last_truncated == 1
