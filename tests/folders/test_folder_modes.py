"""Published folders (``ctxemb export``, ``ctxemb static``) get the mode a plain mkdir gives.

They are built in a private temporary folder (``tempfile.mkdtemp``: 0700) and renamed into place;
the published folder follows the umask like any folder the user makes, so another account (a
service user) can read an export made by a deploy account.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ctxemb_core import contract_for
from ctxemb_core.errors import InvalidInputError
from ctxemb_core.export import export_model
from ctxemb_core.static import static_from_model

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def tiny_contract(tiny_bert):
    """What is exported below: the modes are the folder's, whatever the model (a tiny one is
    copied and checked in milliseconds, MiniLM's 90 MB graph in half a second)."""
    return contract_for(tiny_bert, pooling="mean")


@pytest.mark.parametrize("mask", [0o022, 0o027], ids=["umask-022", "umask-027"])
def test_an_export_folder_follows_the_umask(tiny_contract, tmp_path, mask):
    with umask(mask):
        folder = Path(export_model(tiny_contract, tmp_path / "export"))
        plain = tmp_path / "made-by-mkdir"
        plain.mkdir()
    assert mode(folder) == mode(plain) == 0o777 & ~mask
    for file in folder.iterdir():  # the files were always written under the umask
        assert mode(file) == 0o666 & ~mask, file.name
    assert leftovers(tmp_path) == []  # the private build folder is gone
    assert (folder / "ctxemb-export.json").is_file()


def test_a_replaced_export_follows_the_umask(tiny_contract, tmp_path):
    target = tmp_path / "export"
    with umask(0o022):
        export_model(tiny_contract, target)
        with pytest.raises(InvalidInputError) as err:  # each audience its own words
            export_model(tiny_contract, target)
        python, cli = str(err.value), err.value.message_for("cli")
        assert "overwrite=True" in python and "--overwrite" not in python
        assert "--overwrite" in cli and "overwrite=True" not in cli
        export_model(tiny_contract, target, overwrite=True)
    assert mode(target) == 0o755 and leftovers(tmp_path) == []


def test_a_static_model_folder_follows_the_umask(tmp_path):
    with umask(0o022):
        folder = Path(static_from_model(MINILM, tmp_path / "minilm-static"))
    assert mode(folder) == 0o755
