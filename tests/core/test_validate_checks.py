"""The argument checks every store adapter takes live in ``ctxemb_core.validate`` (issue 44,
item 7): ``guard`` keeps its other jobs and still names them, as the same objects."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ctxemb_core import guard, validate
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
