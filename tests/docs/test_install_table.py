"""The README's extras table says what pyproject.toml's extras are, and nothing else.

The table under the README's ``## Install`` has a row per install: ``ctxemb`` (the base) and
``ctxemb[extra]`` for each of ``[project.optional-dependencies]``, no row more and none missing.
Its second column, "brings", lists the distributions the extra installs, by name and with their
own extras (``psycopg[binary]``), exactly, in any order; the ``all`` row shows the extras ``all``
is made of, as pyproject.toml writes it (``ctxemb[torch,...]``), and names the extras left out of
it. The ``test`` row lists a few of the test extra's ~20 tools (each one of them) and points to
pyproject.toml for the rest.
"""

from __future__ import annotations

import re
from pathlib import Path

import tomllib  # the standard library's from 3.11 (the tests' Python); ruff targets 3.10
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
_ROW = re.compile(
    r"^\| `(?P<install>ctxemb(?:\[[^\]]+\])?)` \| (?P<brings>[^|]+) \| (?P<what>.+) \|$"
)


def _pyproject() -> dict:
    with (REPO / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh)["project"]


def _extras() -> dict[str, list[str]]:
    return _pyproject()["optional-dependencies"]


def _table(readme: str) -> dict[str, tuple[str, str]]:
    """``{extra ("" for the base): (brings, what it gives)}`` from the Install section's table."""
    section = readme.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        match = _ROW.match(line)
        if match is None:
            continue
        extra = match["install"].removeprefix("ctxemb").strip("[]")
        assert extra not in rows, f"two rows for {match['install']}"
        rows[extra] = (match["brings"].strip(), match["what"].strip())
    return rows


def _distribution(spec: str) -> str:
    """A requirement by name and extras, without versions or markers: ``psycopg[binary]``."""
    req = Requirement(spec)
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    return canonicalize_name(req.name) + extras


def _composition(spec: str) -> set[str]:
    req = Requirement(spec.strip("`"))
    assert canonicalize_name(req.name) == "ctxemb", spec
    return set(req.extras)


TABLE = _table((REPO / "README.md").read_text(encoding="utf-8"))


def test_every_extra_has_a_row_and_no_row_is_more() -> None:
    extras = set(_extras())
    rows = set(TABLE) - {""}
    assert "" in TABLE, "the base install (`ctxemb`) has no row"
    assert not extras - rows, f"extras of pyproject.toml without a row: {sorted(extras - rows)}"
    assert not rows - extras, (
        f"rows for extras pyproject.toml does not have: {sorted(rows - extras)}"
    )


def test_each_row_brings_what_its_extra_installs() -> None:
    wanted = {"": _pyproject()["dependencies"], **_extras()}
    for extra, requirements in wanted.items():
        if extra in ("all", "test"):
            continue
        brings = {_distribution(name.strip()) for name in TABLE[extra][0].split(",")}
        assert brings == {_distribution(r) for r in requirements}, f"ctxemb[{extra}]"


def test_the_all_row_is_the_all_extra() -> None:
    (spec,) = _extras()["all"]
    composition = _composition(spec)
    brings, what = TABLE["all"]
    assert _composition(brings) == composition
    left_out = set(_extras()) - composition - {"all", "test"}
    named = set(re.findall(r"`([a-z-]+)`", what))
    assert named == left_out, f"the all row names {sorted(named)} as left out, not {left_out}"


def test_the_test_row_names_only_test_tools() -> None:
    brings, _ = TABLE["test"]
    tools = {_distribution(r) for r in _extras()["test"]}
    named = [n.strip() for n in brings.split(",") if "…" not in n]
    assert named and not {_distribution(n) for n in named} - tools, named
    assert "pyproject.toml" in brings


def test_the_table_is_read_as_written() -> None:
    table = _table(
        "x\n## Install\n\n| install | brings | what |\n|---|---|---|\n"
        "| `ctxemb` | numpy | base |\n| `ctxemb[serve]` | uvicorn | the server |\n\n## Next\n"
        "| `ctxemb[later]` | x | not in the Install section |\n"
    )
    assert table == {"": ("numpy", "base"), "serve": ("uvicorn", "the server")}
    assert _distribution("psycopg[binary]>=3.1") == "psycopg[binary]"
    assert _distribution("PyStemmer>=2.2") == "pystemmer"
