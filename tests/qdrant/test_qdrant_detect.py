"""A collection written the way qdrant-client + fastembed lay it out (vector
``fast-all-minilm-l6-v2``, payload ``document``, random UUIDs), detected and adopted only when
the match is conclusive.

The collection is written as ``QdrantClient.add`` (qdrant-client < 1.17) wrote it, with vectors
from the bundled all-MiniLM-L6-v2: fastembed's own run of that model, pointed at ctxemb's ONNX
export, gives the same vectors within 2e-8 (``test_fastembed_itself_agrees``, run where fastembed
is installed: it cannot download its models here).
"""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
from qdrant_client import QdrantClient, models

from ctxemb_core import contract_for
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.index import GuardedIndex
from ctxemb_core.stamp import IndexStamp
from ctxemb_qdrant._detect import (
    FASTEMBED_TEXT,
    adopt_fastembed,
    detect_fastembed,
    fastembed_vector_name,
)
from ctxemb_qdrant._named import VECTORS_KEY, NamedVectorView

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TEXTS = [
    "Green tea is steamed soon after picking.",
    "A kettle boils water for the tea.",
    "Oolong is partly oxidised.",
    "Matcha is ground from shaded leaves.",
    "Black tea is fully oxidised before drying.",
    "Rooibos is not tea at all.",
]


def fastembed_collection(
    client: QdrantClient, name: str, vectors: np.ndarray, vector: str = fastembed_vector_name(MODEL)
) -> None:
    """What ``QdrantClient.add(name, TEXTS, metadata)`` with fastembed's all-MiniLM-L6-v2
    wrote: one named vector, Cosine, 384 wide; payload ``{"document": text, **metadata}``
    (``vector``: under another model's name, for a collection whose name lies)."""
    client.create_collection(
        name, vectors_config={vector: models.VectorParams(size=384, distance="Cosine")}
    )
    client.upload_points(
        name,
        [
            models.PointStruct(
                id=uuid.uuid4().hex,
                vector={vector: v.tolist()},
                payload={FASTEMBED_TEXT: t, "source": "faq", "n": k},
            )
            for k, (t, v) in enumerate(zip(TEXTS, vectors, strict=True))
        ],
    )


@pytest.fixture(scope="module")
def vectors(minilm) -> np.ndarray:
    return minilm.embed_documents(TEXTS)


@pytest.fixture
def client() -> QdrantClient:
    return QdrantClient(location=":memory:")


def test_the_name_is_fastembeds():
    assert fastembed_vector_name(MODEL) == "fast-all-minilm-l6-v2"


def test_a_fastembed_collection_is_identified_adopted_and_opens_guarded(client, vectors, minilm):
    fastembed_collection(client, "faq", vectors)
    finding = detect_fastembed(client, "faq")
    assert finding.vector == "fast-all-minilm-l6-v2" and finding.models == (MODEL,)
    assert finding.conclusive and finding.report.best.contract.pooling.value == "mean"
    assert "conclusive" in finding.describe()

    adopt_fastembed(client, "faq")
    stamps = client.get_collection("faq").config.metadata[VECTORS_KEY]
    stamp = IndexStamp.from_metadata(stamps["fast-all-minilm-l6-v2"])
    assert stamp.fingerprint == minilm.contract.fingerprint
    view = NamedVectorView(client, "faq", finding.vector, text_key="document", metadata_key=None)
    opened = GuardedIndex.open(view, minilm)
    (best,) = opened.query("Which tea is ground from shaded leaves?", 1)[0]
    assert best.text == TEXTS[3] and best.metadata == {"source": "faq", "n": 3}
    assert adopt_fastembed(client, "faq").conclusive  # again: the same stamp, nothing changes


def test_vectors_the_model_did_not_make_are_not_adopted(client, vectors):
    rng = np.random.default_rng(0)
    other = vectors + rng.normal(0, 0.2, vectors.shape).astype(np.float32)
    fastembed_collection(client, "noisy", other / np.linalg.norm(other, axis=1, keepdims=True))
    finding = adopt_fastembed(client, "noisy")
    assert not finding.conclusive
    assert not (client.get_collection("noisy").config.metadata or {}).get(VECTORS_KEY)


def test_another_layout_is_refused(client):
    client.create_collection("plain", vectors_config=models.VectorParams(size=4, distance="Dot"))
    with pytest.raises(InvalidInputError, match="fastembed's layout"):
        detect_fastembed(client, "plain")
    with pytest.raises(InvalidInputError, match="does not exist"):
        detect_fastembed(client, "missing")


@pytest.mark.figures_extra
def test_fastembed_itself_agrees(tmp_path, vectors):
    """fastembed's TextEmbedding over ctxemb's ONNX export of the bundled model (no download)
    gives the vectors the collection above was written with."""
    fastembed = pytest.importorskip("fastembed")
    import shutil

    from ctxemb_core.export import export_model
    from ctxemb_core.folders.locate import locate_model

    folder = tmp_path / "export"
    export_model(contract_for(MODEL), folder)
    model = tmp_path / "fastembed"
    model.mkdir()
    for name in ("model.onnx", "tokenizer.json"):
        shutil.copy(folder / name, model / name)
    for name in ("config.json", "special_tokens_map.json", "tokenizer_config.json"):
        shutil.copy(locate_model(MODEL) / name, model / name)
    embedding = fastembed.TextEmbedding(
        MODEL, specific_model_path=str(model), cache_dir=str(tmp_path / "cache")
    )
    got = np.array(list(embedding.passage_embed(TEXTS)))
    assert np.abs(got - vectors).max() < 1e-6


def test_the_adapters_detect_and_adopt_take_a_fastembed_collection(client, vectors, minilm):
    """What ``ctxemb detect --store qdrant --collection faq [--adopt]`` calls: the adapter's
    ``detect``, then its ``open_collection(..., create=False, adopt=True)``."""
    import ctxemb_qdrant

    fastembed_collection(client, "faq", vectors)
    report = ctxemb_qdrant.detect(client, "faq", sample=8)
    assert report.conclusive and report.stamped is None
    opened = ctxemb_qdrant.open_collection(client, "faq", minilm, create=False, adopt=True)
    assert opened.count() == len(TEXTS)
    assert ctxemb_qdrant.detect(client, "faq", sample=8).stamp_match


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from ctxemb_core.cli import main

    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_an_adopted_fastembed_collection_serves_every_command(tmp_path, vectors, minilm, capsys):
    """Once adopted, the fastembed vector is what every path reads: open_collection (the
    package's own guarded type), core's tools and the ``ctxemb`` store commands."""
    import ctxemb_qdrant

    folder = tmp_path / "q"
    fastembed_collection(ctxemb_qdrant.connect(folder), "faq", vectors)
    store = ("--store", "qdrant", "--qdrant-path", str(folder), "--collection", "faq")
    code, out, err = run(capsys, "detect", *store, "--adopt", "--sample", "6")
    assert code == 0 and "adopted" in out, err
    code, out, err = run(
        capsys, "query", *store, "--json", "Which tea is ground from shaded leaves?"
    )
    assert code == 0 and json.loads(out)["results"][0]["text"] == TEXTS[3], err
    code, out, err = run(capsys, "query", *store, "--model", MODEL, "shaded leaves")
    assert code == 0 and "Matcha" in out, err
    code, out, err = run(capsys, "verify", *store, "--all")
    assert code == 0 and json.loads(out)["ok"], err
    code, out, err = run(capsys, "alias", *store, "create", "faq-live")
    assert code == 0, err
    code, out, err = run(capsys, "migrate", *store, "--to", "faq2")
    assert code == 0, err

    client = ctxemb_qdrant.connect(folder)
    opened = ctxemb_qdrant.open_collection(client, "faq", minilm, create=False)
    assert isinstance(opened, ctxemb_qdrant.GuardedQdrantCollection)
    got = opened.query(["Which tea is ground from shaded leaves?"], n_results=1)
    assert got["documents"] == [[TEXTS[3]]] and got["metadatas"] == [[{"source": "faq", "n": 3}]]
    assert opened.get(where={"source": "faq"})["ids"] and opened.count() == len(TEXTS)
    with pytest.raises(InvalidInputError, match="fastembed's layout"):
        opened.add(["x"], ["A new tea."])
    moved = ctxemb_qdrant.open_collection(client, "faq2", minilm, create=False)
    assert moved.query(["shaded leaves"], n_results=1)["documents"] == [[TEXTS[3]]]
    assert np.array_equal(
        np.asarray(moved.get(include=["embeddings"])["embeddings"]).shape, (len(TEXTS), 384)
    )


def test_a_vector_name_that_claims_another_model_is_not_conclusive(tmp_path, vectors, capsys):
    """A ``fast-bge-small-en`` vector holding MiniLM's vectors: the name says one model, the
    vectors another; neither ctxemb_qdrant.detect nor ``ctxemb detect --adopt`` takes it."""
    import ctxemb_qdrant

    folder = tmp_path / "q"
    client = ctxemb_qdrant.connect(folder)
    fastembed_collection(client, "liar", vectors, vector="fast-bge-small-en")
    with pytest.raises(InvalidInputError, match="names no model ctxemb knows"):
        ctxemb_qdrant.detect(client, "liar", sample=6)
    report = ctxemb_qdrant.detect(client, "liar", MODEL, sample=6)
    assert not report.conclusive and "claims another model" in report.unknown[0]
    assert not detect_fastembed(client, "liar", MODEL, sample=6).conclusive
    store = ("--store", "qdrant", "--qdrant-path", str(folder), "--collection", "liar")
    code, out, err = run(capsys, "detect", *store, "--adopt", "--model", MODEL, "--sample", "6")
    assert code != 0 and "claims another model" in out + err
    held = ctxemb_qdrant.connect(folder).get_collection("liar").config.metadata
    assert not (held or {}).get(VECTORS_KEY)
