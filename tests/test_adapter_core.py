"""What every adapter takes from core: the Embedder's config and rebuild, the migration loop."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxemb_core import Embedder
from ctxemb_core.errors import DataFormatError, InvalidInputError
from ctxemb_core.migrate import Page, copy_missing

TEXTS = ["Green tea leaves are steamed.", "A bicycle chain likes oil."]


def test_an_embedder_config_survives_json_and_embeds_identically(minilm):
    config = json.loads(json.dumps(minilm.config()))
    assert config["contract"] == minilm.contract.to_dict()
    again = Embedder.from_config(config)
    assert again.contract == minilm.contract and again.backend == minilm.backend
    np.testing.assert_array_equal(again.embed_documents(TEXTS), minilm.embed_documents(TEXTS))
    assert Embedder.from_config(config, batch_size=3).batch_size == 3


def test_a_path_hint_is_only_a_hint(minilm, tiny_bert):
    config = minilm.config()
    for hint in (str(tiny_bert), "/no/such/folder", ""):
        again = Embedder.from_config({**config, "path_hint": hint})
        assert again.contract == minilm.contract
        assert again.model_path == minilm.model_path  # found by its digest, not the hint


@pytest.mark.parametrize(
    "bad",
    [None, [], "contract", {"path_hint": "x"}, {"contract": {}}, {"contract": None}],
)
def test_a_config_that_is_not_one_is_a_data_format_error(bad):
    with pytest.raises(DataFormatError):
        Embedder.from_config(bad)


def test_unknown_config_keys_are_named(minilm):
    with pytest.raises(DataFormatError, match="'colour'"):
        Embedder.from_config({**minilm.config(), "colour": "blue"})


def test_chroma_configs_written_before_the_embedder_config_still_build(minilm):
    from ctxemb_chroma import ContractEmbeddingFunction

    old = {
        "contract": minilm.contract.to_dict(),
        "fingerprint": minilm.fingerprint,
        "path_hint": str(minilm.model_path),
    }
    ef = ContractEmbeddingFunction.build_from_config(old)
    assert ef.contract == minilm.contract
    again = ContractEmbeddingFunction.build_from_config(ef.get_config())
    assert again.contract == minilm.contract


def _pages(records, size):
    for start in range(0, len(records), size):
        chunk = records[start : start + size]
        yield Page([r[0] for r in chunk], [r[1] for r in chunk], [r[2] for r in chunk])


def test_copy_missing_writes_only_what_the_target_lacks_and_resumes():
    records = [(f"d{k}", f"text {k}", {"k": k} if k % 2 else None) for k in range(7)]
    written: list[tuple[list[str], list[str], object]] = []

    def write(ids, docs, metas):
        written.append((ids, docs, metas))

    done = {"d1", "d4"}
    n = copy_missing(_pages(records, 3), write, done, total=7, progress=False)
    assert n == 5
    assert [i for ids, _, _ in written for i in ids] == ["d0", "d2", "d3", "d5", "d6"]
    assert written[0] == (["d0", "d2"], ["text 0", "text 2"], None)  # no metadata: None
    assert written[1] == (["d3", "d5"], ["text 3", "text 5"], [{"k": 3}, {"k": 5}])
    assert copy_missing(_pages(records, 3), write, {r[0] for r in records}, total=7) == 0


def test_copy_missing_refuses_records_without_text_naming_them():
    records = [("a", "text", None), ("b", None, None)]
    with pytest.raises(InvalidInputError, match=r"\['b'\].*no stored text"):
        copy_missing(_pages(records, 5), lambda *a: None, set(), total=2, progress=False)
    with pytest.raises(InvalidInputError, match="total"):
        copy_missing([], lambda *a: None, set(), total=-1)
