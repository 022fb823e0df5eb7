"""One rule for "same contract" (issue 44, item 5): :func:`ctxemb_core.contract.same_contract`.

Same fingerprint, or only a label (``model``, ``query_model``) differs over the same weights:
every check that holds one contract to another asks that one function. The source is scanned
for any other comparison of fingerprints, recipes or diff kinds, and each site the rule decides
is run with a label-only change (accepted) and with a change of every recipe field (refused).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxemb_core import Embedder, IndexStamp
from ctxemb_core.contract import EmbeddingContract, same_contract
from ctxemb_core.documents import (
    FINGERPRINT_KEY,
    batch_fingerprint,
    check_documents,
    check_fingerprint,
    remember,
    stamp_meta,
)
from ctxemb_core.errors import ContractMismatchError, InvalidInputError
from ctxemb_core.guard import check_binding, verify_index
from ctxemb_core.hybrid import Fusion
from ctxemb_core.hybrid.contract import HybridContract
from ctxemb_core.hybrid.guard import check_caller
from ctxemb_core.hybrid.lexical import LexicalContract

REPO = Path(__file__).resolve().parents[2]

# Where a comparison of fingerprints may be written: the rule itself, and the stamp reading
# back its own serialisation (its fingerprint against its contract JSON).
ALLOWED = {
    ("ctxemb_core/contract.py", "same_contract"),
    ("ctxemb_core/stamp.py", "from_metadata"),
    # Whether an option changes the contract built here: a field's scope, not two contracts.
    ("ctxemb_core/resolve.py", "static_contract"),
}
_NAMES = {"fingerprint", "recipe", "old_fingerprint", "new_fingerprint"}


def _about_contracts(node: ast.AST) -> bool:
    """Whether an operand is a fingerprint, a recipe or the kind of a diff."""
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in _NAMES:
            return True
        if isinstance(n, ast.Attribute) and n.attr in {"LABEL", "IDENTICAL"}:
            return True  # DiffKind.LABEL: "identical or a label" is the rule itself
        if isinstance(n, ast.Call) and ast.unparse(n.func).endswith(".diff"):
            return True
        if isinstance(n, ast.Name) and "fingerprint" in n.id:
            return True
        if isinstance(n, ast.Constant) and n.value == "fingerprint":
            parent = getattr(n, "parent", None)
            if isinstance(parent, ast.Subscript) or (
                isinstance(parent, ast.Call) and ast.unparse(parent.func).endswith(".get")
            ):
                return True
    return False


def _a_contract(node: ast.AST) -> bool:
    """Whether an operand is itself a contract (``x.contract``, ``caller_contract``): two
    contracts compared with ``==`` decide sameness without the rule (a label twin differs)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "contract"
    return isinstance(node, ast.Name) and node.id.endswith("contract")


def _comparisons(source: str, relative: str) -> list[str]:
    tree = ast.parse(source)
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            child.parent = parent  # type: ignore[attr-defined]
    allowed = {name for file, name in ALLOWED if file == relative}
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in allowed:
            skip.update(id(n) for n in ast.walk(node))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or id(node) in skip:
            continue
        operands = [node.left, *node.comparators]
        if any(isinstance(o, ast.Constant) and o.value is None for o in operands):
            continue  # "is there one at all", not "is it the same"
        if all(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            # Membership is a lookup, unless it is a comparison spelt as a literal tuple.
            operands = [
                o for o in node.comparators if isinstance(o, (ast.Tuple, ast.List, ast.Set))
            ]
            if operands:
                operands.append(node.left)
        equality = all(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops)
        if any(_about_contracts(o) for o in operands) or (
            equality and any(_a_contract(o) for o in operands)
        ):
            found.append(f"{relative}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_comparison_of_contracts_outside_the_rule():
    files = sorted((REPO / "ctxemb_core").rglob("*.py"))
    files += sorted((REPO / "integrations").glob("ctxemb_*/**/*.py"))
    found = [
        line
        for path in files
        for line in _comparisons(
            path.read_text(encoding="utf-8"), path.relative_to(REPO).as_posix()
        )
    ]
    assert found == [], "call ctxemb_core.contract.same_contract instead:\n" + "\n".join(found)


def test_the_scan_finds_what_it_looks_for():
    # The scanner itself, on the forms the old sites took.
    forms = [
        "a.fingerprint == b.fingerprint",
        "stamp.contract.diff(c).kind is not DiffKind.LABEL",
        "x.recipe != y.recipe",
        "carried != contract.fingerprint",
        "meta['fingerprint'] != fp",
        "config.get('fingerprint') not in (None, contract.fingerprint)",
        "inner != self._embeddings.contract",
        "given.contract == contract",
    ]
    fine = ["fingerprint is None", "key in contracts", "len(fp) != 64", "kind == 'label'"]
    source = "\n".join(f"x{i} = {f}" for i, f in enumerate(forms + fine))
    found = _comparisons(source, "probe.py")
    assert [line.split(": ", 1)[1] for line in found] == [
        ast.unparse(ast.parse(f).body[0].value)  # type: ignore[attr-defined]
        for f in forms
    ]


# -- the rule, site by site ----------------------------------------------------------------

D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
BASE = EmbeddingContract(model="acme/base", weights=D1, pooling="mean", dimension=16)
PAIR = BASE.with_(query_model="acme/query", query_weights=D2)

LABELS: dict[str, tuple[EmbeddingContract, dict[str, Any]]] = {
    "model": (BASE, {"model": "acme/base-copy"}),
    "query_model": (PAIR, {"query_model": "acme/query-copy"}),
    "model and query_model": (PAIR, {"model": "x", "query_model": "y"}),
}
# One change of every recipe field (schema has one valid value).
RECIPE: dict[str, tuple[EmbeddingContract, dict[str, Any]]] = {
    "weights": (BASE, {"weights": D2}),
    "pooling": (BASE, {"pooling": "cls"}),
    "dimension": (BASE, {"dimension": 32}),
    "query_prefix": (BASE, {"query_prefix": "query: "}),
    "document_prefix": (BASE, {"document_prefix": "passage: "}),
    "normalize": (BASE, {"normalize": False}),
    "truncate_dim": (BASE, {"truncate_dim": 8}),
    "max_tokens": (BASE, {"max_tokens": 64}),
    "precision": (BASE, {"precision": "float16"}),
    "quantization": (BASE, {"quantization": "int8-dynamic-pc-v1"}),
    "query_weights": (PAIR, {"query_weights": D1}),
    "layers": (BASE, {"layers": "-2"}),
    "include_prompt": (BASE, {"include_prompt": False}),
}


def test_every_field_is_a_label_or_a_recipe_field():
    fields = {f.name for f in dataclasses.fields(EmbeddingContract)} - {"schema"}
    assert fields == set(RECIPE) | {"model", "query_model"}


def _stamp(contract: EmbeddingContract) -> IndexStamp:
    canary = np.ones((2, contract.output_dim), np.float32)
    return IndexStamp(contract, ("a probe",), canary)


def _accepted(check: Any) -> bool:
    try:
        check()
    except ContractMismatchError:
        return False
    return True


def _sites(index: EmbeddingContract, caller: EmbeddingContract) -> dict[str, bool]:
    """What each check decides for ``caller`` against an index under ``index``."""
    remember(index)
    remember(caller)
    hybrid = HybridContract(index, LexicalContract(), Fusion())
    metadata = _stamp(index).to_metadata()
    return {
        "same_contract": same_contract(index, caller),
        "stamp": _accepted(lambda: _stamp(index).check_contract(caller)),
        "store hook": _accepted(lambda: check_binding(metadata, caller, "it")),
        "persisted setting": _accepted(
            lambda: check_binding(
                None, caller, "it", configured=index.to_dict(), require_stamp=False
            )
        ),
        "query fingerprint": _accepted(lambda: check_fingerprint(caller.fingerprint, index)),
        "documents": _accepted(lambda: check_documents([stamp_meta({}, index)], caller)),
        "restamped document": _accepted(
            lambda: stamp_meta({FINGERPRINT_KEY: index.fingerprint}, caller)
        ),
        "hybrid": _accepted(lambda: check_caller(hybrid, hybrid.with_(dense=caller))),
        # One batch of documents embedded under both (a writer's batch, Haystack's, hybrid's).
        "one batch": _accepted(
            lambda: batch_fingerprint([stamp_meta({}, index), stamp_meta({}, caller)])
        ),
    }


@pytest.mark.parametrize("name", LABELS)
def test_a_label_only_difference_is_accepted_everywhere(name):
    index, change = LABELS[name]
    caller = index.with_(**change)
    decided = _sites(index, caller)
    assert decided == dict.fromkeys(decided, True)
    assert not same_contract(index, caller, exact=True)  # two records of one contract: exact
    assert same_contract(index, caller.fingerprint) is False  # a bare fingerprint names no recipe


@pytest.mark.parametrize("name", RECIPE)
def test_a_change_of_any_recipe_field_is_refused_everywhere(name):
    index, change = RECIPE[name]
    for caller in (index.with_(**change), index.with_(**change, model="acme/renamed")):
        decided = _sites(index, caller)
        assert decided == dict.fromkeys(decided, False), name


def test_the_rule_on_fingerprints_and_other_contracts():
    assert same_contract(BASE, BASE.fingerprint) and same_contract(BASE.fingerprint, BASE)
    assert same_contract(BASE.fingerprint, BASE.fingerprint, exact=True)
    assert not same_contract(BASE.fingerprint, PAIR.fingerprint)
    hybrid = HybridContract(BASE, LexicalContract(), Fusion())
    assert same_contract(hybrid, hybrid.fingerprint)
    # A label is forgiven only between embedding contracts, whose recipe is known.
    assert not same_contract(hybrid, hybrid.with_(dense=BASE.with_(model="x")))
    with pytest.raises(InvalidInputError, match="contract or its fingerprint"):
        same_contract(BASE, 42)  # type: ignore[arg-type]


def test_verify_reports_a_label_only_difference_as_a_match(minilm, minilm_contract):
    renamed = Embedder(minilm_contract.with_(model="acme/minilm-copy"))
    stamp = IndexStamp.from_embedder(minilm)
    assert verify_index(stamp.to_metadata(), renamed).fingerprint_match
    other = Embedder(minilm_contract.with_(query_prefix="query: "))
    assert not verify_index(stamp.to_metadata(), other).fingerprint_match
