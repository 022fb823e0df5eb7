"""An open that does not redo verified work (ctxemb_core.verified), embedded and on a server.

A collection that passed an open under a contract is not sampled again while its ids (on a
server) or its write mark (embedded) are unchanged; what changed since is checked first and a
foreign vector among it is refused; another contract, a damaged or edited record never spares
a check. The stored documents re-embedded are counted through the embedder itself, not
inferred from timings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import DOCS, fresh_name

from ctxemb_chroma import ChromaDriver, open_collection, verify
from ctxemb_core import Embedder
from ctxemb_core.contract import Role
from ctxemb_core.errors import ForeignVectorsError
from ctxemb_core.stamp import PROBES


class CountingEmbedder(Embedder):
    """The real embedder, counting the stored documents it re-embeds to verify an index."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.documents = 0  # texts embedded through embed_float with the document role
        self.calls: list[list[str]] = []  # the texts of each embed_float call

    def embed_float(self, texts, role, *, warn=True):
        self.calls.append(list(texts))
        if Role.parse(role, "role") is Role.DOCUMENT:
            self.documents += len(texts)
        return super().embed_float(texts, role, warn=warn)

    def reset(self) -> None:
        self.documents, self.calls = 0, []


@pytest.fixture
def counting(base) -> CountingEmbedder:
    return CountingEmbedder(base)


@pytest.fixture
def filled(client, base):
    """A stamped collection of the six DOCS (written by ctxemb) and its name."""
    name = fresh_name()
    open_collection(client, name, base).add(list(DOCS), list(DOCS.values()))
    return name


def records_checked(embedder: CountingEmbedder) -> int:
    # Every open re-embeds the canary's document rows; the rest are stored records.
    return embedder.documents - len(PROBES)


@pytest.mark.transport
def test_a_second_open_of_an_unchanged_collection_re_embeds_no_stored_record(
    client, filled, counting
):
    first = open_collection(client, filled, counting, create=False, sample=4)
    assert records_checked(counting) == 4
    assert first.open_check.checked == 4 and not first.open_check.reused
    counting.reset()
    second = open_collection(client, filled, counting, create=False, sample=4)
    assert records_checked(counting) == 0  # before: 4 again, on every open
    # The canary: still re-embedded every time (one pass: MiniLM embeds both roles alike).
    assert counting.calls == [list(PROBES)]
    assert second.open_check.checked == 0 and second.open_check.changed == 0
    assert second.query(["green tea"], n_results=1)["ids"] == [["tea"]]
    # sample=0 neither reads nor writes a record, and checks the stamp and canary only.
    counting.reset()
    none = open_collection(client, filled, counting, create=False, sample=0)
    assert records_checked(counting) == 0 and none.open_check.records is None


def test_a_record_added_through_ctxemb_since_is_checked_first(client, filled, counting, base):
    open_collection(client, filled, base, create=False, sample=2)
    open_collection(client, filled, base, create=False).add(["kiln"], ["Clay hardens in a kiln."])
    opened = open_collection(client, filled, counting, create=False, sample=2)
    # The new record, then one random other: the usual sample size, changed records first.
    assert opened.open_check.changed == 1 and opened.open_check.checked == 2
    assert records_checked(counting) == 2
    counting.reset()
    again = open_collection(client, filled, counting, create=False, sample=2)
    assert records_checked(counting) == 0 and again.open_check.changed == 0


@pytest.mark.transport
def test_a_foreign_record_added_by_a_raw_client_since_is_refused(client, filled, base):
    open_collection(client, filled, base, create=False, sample=2)
    raw = client.get_collection(filled, embedding_function=None)
    wrong = Embedder(base.with_(pooling="cls"))  # the same width, another recipe
    text = "An intruding note."
    raw.add(ids=["intruder"], documents=[text], embeddings=wrong.embed_documents([text]))
    for _ in range(2):  # refused every time: a failed open records nothing
        with pytest.raises(ForeignVectorsError) as info:
            open_collection(client, filled, base, create=False, sample=2)
        assert info.value.ids == ("intruder",)


def test_a_record_deleted_and_written_again_by_a_raw_client_is_checked(client, filled, base):
    open_collection(client, filled, base, create=False, sample=2)
    raw = client.get_collection(filled, embedding_function=None)
    wrong = Embedder(base.with_(pooling="cls"))
    # Same ids, same count: but the store puts a record written again at the end.
    raw.delete(ids=["moon"])
    raw.add(
        ids=["moon"], documents=[DOCS["moon"]], embeddings=wrong.embed_documents([DOCS["moon"]])
    )
    with pytest.raises(ForeignVectorsError) as info:
        open_collection(client, filled, base, create=False, sample=2)
    assert info.value.ids == ("moon",)


def test_another_contract_never_uses_the_record(client, filled, base):
    open_collection(client, filled, base, create=False, sample=3)
    # Another name over the same weights: accepted on open (a label change), another key.
    other = CountingEmbedder(base.with_(model="my-team/minilm"))
    opened = open_collection(client, filled, other, create=False, sample=3)
    assert not opened.open_check.reused and records_checked(other) == 3


def _marked(client, name: str) -> bool:
    """Whether the store keeps a write mark (embedded Chroma): its record is then the mark of
    the verified state, not its ids (ctxemb_core.verified)."""
    return ChromaDriver(client, name).capabilities.marks


def _record_of(client, name: str, embedder: CountingEmbedder) -> Path:
    open_collection(client, name, embedder, create=False, sample=3)
    path = sorted(
        (Path(os.environ["CTXEMB_CACHE_DIR"]) / "verified").glob("*.json"), key=os.path.getmtime
    )[-1]
    data = json.loads(path.read_text())
    if _marked(client, name):
        assert data["mark"] == ChromaDriver(client, name).head().mark
    else:
        assert data["ids"] == list(DOCS)
    return path


@pytest.mark.parametrize(
    "damage",
    ["truncated", "an id edited", "another key", "not json", "another schema", "a directory"],
)
def test_a_damaged_or_edited_record_is_ignored(client, filled, counting, damage):
    path = _record_of(client, filled, counting)
    data = json.loads(path.read_text())
    if damage == "truncated":
        path.write_text(path.read_text()[:40])
    elif damage == "an id edited":  # the checksum no longer matches
        if "ids" in data:
            path.write_text(json.dumps({**data, "ids": [*data["ids"], "forged"]}))
        else:  # the record of a store with a write mark: its mark edited
            path.write_text(json.dumps({**data, "mark": data["mark"] - 1}))
    elif damage == "another key":
        key = {**json.loads(data["key"]), "collection": "another"}
        path.write_text(json.dumps({**data, "key": json.dumps(key, sort_keys=True)}))
    elif damage == "not json":
        path.write_bytes(b"\xff\x00 nothing")
    elif damage == "another schema":
        path.write_text(json.dumps({**data, "schema": 99}))
    else:
        path.unlink()
        path.mkdir()
    counting.reset()
    opened = open_collection(client, filled, counting, create=False, sample=3)
    assert not opened.open_check.reused and records_checked(counting) == 3


def test_a_record_replaced_by_a_link_is_replaced_not_followed(client, filled, counting, tmp_path):
    path = _record_of(client, filled, counting)
    victim = tmp_path / "someone-elses-file"
    victim.write_text("keep me")
    path.unlink()
    path.symlink_to(victim)
    counting.reset()
    opened = open_collection(client, filled, counting, create=False, sample=3)
    assert not opened.open_check.reused and records_checked(counting) == 3
    assert victim.read_text() == "keep me" and not path.is_symlink()


def test_a_recorded_collection_whose_encoder_drifted_is_still_refused(client, filled, base):
    from ctxemb_core.errors import EncoderDriftError

    open_collection(client, filled, base, create=False, sample=2)  # recorded: nothing changes

    class Drifted(Embedder):
        def embed_float(self, texts, role, *, warn=True):
            return super().embed_float(texts, role, warn=warn) * 1.01

    with pytest.raises(EncoderDriftError):
        open_collection(client, filled, Drifted(base), create=False, sample=2)


def test_what_a_record_skips_is_what_its_docs_say_and_verify_still_finds_it(client, filled, base):
    open_collection(client, filled, base, create=False, sample=2)
    raw = client.get_collection(filled, embedding_function=None)
    wrong = Embedder(base.with_(pooling="cls"))
    # A foreign rewrite in place: same ids, same order, same count (ctxemb_core.verified says
    # a record of ids cannot see this; without a record the sample finds it with its
    # probability). A store with a write mark (embedded Chroma) numbers the rewrite, so the next
    # open re-embeds it first and refuses it.
    raw.update(ids=["bank"], embeddings=wrong.embed_documents([DOCS["bank"]]))
    if _marked(client, filled):
        with pytest.raises(ForeignVectorsError) as err:
            open_collection(client, filled, base, create=False, sample=2)
        assert err.value.ids == ("bank",)
    else:
        opened = open_collection(client, filled, base, create=False, sample=2)
        assert opened.open_check.checked == 0
    report = verify(raw, base, all=True, progress=False)
    assert not report.ok and report.bad_ids == ("bank",)


# -- identities, not names (issue 42, item 9) -------------------------------------------------


@pytest.fixture(scope="module")
def clean_export(base, tmp_path_factory) -> Path:
    from ctxemb_core.export import export_model

    return Path(export_model(base, tmp_path_factory.mktemp("export") / "minilm"))


@pytest.fixture
def own_registry(monkeypatch):
    """The process's model registry as it was before the test: an edited export the test
    loads is registered under the weights digest of MiniLM, whose contract later tests of this
    worker resolve (and would find the edited copy, refused, first)."""
    from ctxemb_core.folders import locate

    monkeypatch.setattr(locate, "_REGISTRY", dict(locate._REGISTRY))
    monkeypatch.setattr(locate, "_LOCATIONS", {k: list(v) for k, v in locate._LOCATIONS.items()})


def edited_copy(export: Path, target: Path) -> Path:
    """A copy of ``export`` whose tokenizer swaps two word pieces no probe uses ("tea" and
    "coffee"), its manifest rewritten to match: every file is "the one exported"."""
    import hashlib
    import shutil

    shutil.copytree(export, target)
    file = target / "tokenizer.json"
    tokenizer = json.loads(file.read_text(encoding="utf-8"))
    vocab = tokenizer["model"]["vocab"]
    vocab["tea"], vocab["coffee"] = vocab["coffee"], vocab["tea"]
    data = json.dumps(tokenizer, ensure_ascii=False).encode()
    file.write_bytes(data)
    manifest = json.loads((target / "ctxemb-export.json").read_text(encoding="utf-8"))
    manifest["files"]["tokenizer.json"] = hashlib.sha256(data).hexdigest()
    (target / "ctxemb-export.json").write_text(json.dumps(manifest), encoding="utf-8")
    return target


def test_an_export_with_an_edited_tokenizer_never_uses_a_clean_copys_record(
    client, filled, clean_export, tmp_path, monkeypatch, own_registry
):
    import shutil

    from ctxemb_core.stamp import IndexStamp

    clean = CountingEmbedder.from_export(clean_export)
    open_collection(client, filled, clean, create=False, sample=16)
    clean.reset()
    assert open_collection(client, filled, clean, create=False, sample=16).open_check.reused
    # Another copy of the same files is the same encoder: files, not paths.
    moved = CountingEmbedder.from_export(shutil.copytree(clean_export, tmp_path / "moved"))
    assert open_collection(client, filled, moved, create=False, sample=16).open_check.reused
    # Loaded where the model folder was never read (no tokenizer of its weights kept to hold
    # it to: see the test below), so the open's sample is what can tell.
    with monkeypatch.context() as elsewhere:
        elsewhere.setenv("CTXEMB_CACHE_DIR", str(tmp_path / "elsewhere"))
        edited = CountingEmbedder.from_export(edited_copy(clean_export, tmp_path / "edited"))
    assert edited.contract == clean.contract  # the contract cannot tell them apart
    # Nor can the canary: no probe holds the pieces swapped.
    IndexStamp.from_embedder(clean).verify(edited)
    edited.reset()
    # Before: the clean copy's record was used (checked=0) and the collection served.
    with pytest.raises(ForeignVectorsError) as info:
        open_collection(client, filled, edited, create=False, sample=16)
    assert info.value.ids == ("tea",)  # the stored record whose text holds a swapped piece
    assert records_checked(edited) == len(DOCS)
    assert edited.identity != clean.identity == moved.identity


def test_a_collection_deleted_and_made_again_under_its_name_is_sampled_again(client, filled, base):
    open_collection(client, filled, base, create=False, sample=2)
    assert open_collection(client, filled, base, create=False, sample=2).open_check.reused
    old = client.get_collection(filled, embedding_function=None)
    stamp = {k: v for k, v in (old.metadata or {}).items() if k.startswith("ctxemb:")}
    got = old.get(include=["documents"])
    client.delete_collection(filled)
    # Made again around ctxemb: the stamp copied over, the same ids in the same order, the
    # vectors of another recipe.
    from ctxemb_chroma import ContractEmbeddingFunction

    function = ContractEmbeddingFunction(Embedder(base))
    raw = client.create_collection(filled, metadata=stamp, embedding_function=function)
    wrong = Embedder(base.with_(pooling="cls"))
    raw.add(
        ids=got["ids"],
        documents=got["documents"],
        embeddings=wrong.embed_documents(got["documents"]),
    )
    with pytest.raises(ForeignVectorsError):
        open_collection(client, filled, base, create=False, sample=2)


def test_an_export_with_an_edited_tokenizer_is_refused_where_its_weights_tokenizer_is_kept(
    base, clean_export, tmp_path, own_registry
):
    from ctxemb_core.errors import MalformedModelError

    Embedder(base).embed_query("warm")  # this machine read the model folder (its tokenizer kept)
    Embedder.from_export(clean_export)  # the clean copy has the same vocabulary
    # Before: served (same contract, every file "the one exported", the canary passes).
    with pytest.raises(MalformedModelError, match="pieces differ") as info:
        Embedder.from_export(edited_copy(clean_export, tmp_path / "edited"))
    assert "'coffee'" in str(info.value) and "'tea'" in str(info.value)
    assert "ctxemb export" in str(info.value)  # the fix: make the export again
    # Refused, it is not what the contract resolves to afterwards in this process.
    from ctxemb_core.folders.locate import locate_model

    assert locate_model(base.model, base.weights).resolve() != (tmp_path / "edited").resolve()
