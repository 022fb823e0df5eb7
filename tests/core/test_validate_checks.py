"""The argument checks every store adapter takes live in ``ctxemb_core.validate`` (issue 44,
item 7): ``guard`` keeps its other jobs and still names them, as the same objects."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ctxemb_core import guard, records, stamp_guard, undo, validate
from ctxemb_core.errors import InvalidInputError

MOVED = [
    "check_count",
    "check_delete",
    "check_flag",
    "check_ids",
    "check_paging",
    "check_records",
    "check_sample_size",
]


@pytest.mark.parametrize("name", MOVED)
def test_each_check_is_validates_and_guard_still_names_it(name):
    check = getattr(validate, name)
    assert check.__module__ == "ctxemb_core.validate" and name in validate.__all__
    assert getattr(guard, name) is check and name in guard.__all__


def test_guard_defines_no_argument_check():
    tree = ast.parse(Path(guard.__file__).read_text(encoding="utf-8"))
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert defined.isdisjoint(MOVED)


def test_the_checks_refuse_as_before():
    with pytest.raises(InvalidInputError, match="create must be True or False"):
        validate.check_flag(1, "create")
    with pytest.raises(InvalidInputError, match="duplicate id 'a'"):
        validate.check_ids(["a", "a"])
    with pytest.raises(InvalidInputError, match="delete needs ids or where"):
        validate.check_delete(None, {"where": None})
    assert validate.check_records(["a"], ["text"], None) == (["a"], None)


# Every name guard gave before the split (issue 44, item 7), each from the one module of its job.
GUARD_NAMES = {
    records: [
        "NO_TEXT", "OPEN_SAMPLE", "OTHER_VECTOR", "OTHER_WIDTH", "RecordCheck", "check_stored",
        "detection_probability", "record_tolerance", "records_progress", "refuse_foreign",
        "refuse_vectorless", "sample_cosines", "sample_ranges", "similarity", "storable",
        "stored_form",
    ],
    stamp_guard: [
        "RESTAMPABLE", "RestampReport", "VerifyReport", "adopt_stamp", "as_embedder",
        "check_binding", "check_configuration", "check_querier", "check_querier_canary",
        "check_storage", "open_stamp", "restamp_stamp", "verify_index",
    ],
    undo: ["add_missing", "deferred_interrupts", "undoable_write"],
    validate: [*MOVED, "check_embedded", "check_query_vector"],
}  # fmt: skip


@pytest.mark.parametrize("module", GUARD_NAMES, ids=lambda m: m.__name__)
def test_guard_still_names_every_name_from_the_module_of_its_job(module):
    for name in GUARD_NAMES[module]:
        assert name in module.__all__, name
        assert getattr(guard, name) is getattr(module, name), name
    assert set(guard.__all__) == {n for names in GUARD_NAMES.values() for n in names}
