"""An install without an extra a model folder needs: one error naming what to install, or the
torch backend serving and saying so once per process."""

from __future__ import annotations

import subprocess

import pytest

# Faithful to "not installed": the path finder does not see these packages.
_NOT_INSTALLED = """
import importlib.machinery, sys
GONE = {gone!r}

class Hider(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in GONE:
            return None
        return super().find_spec(name, path, target)

sys.meta_path[:] = [Hider if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
"""


def _run_without(gone: tuple[str, ...], code: str, cache: str) -> subprocess.CompletedProcess:
    import os
    import sys

    return subprocess.run(
        [sys.executable, "-c", _NOT_INSTALLED.format(gone=gone) + code],
        capture_output=True,
        text=True,
        env={**os.environ, "CTXEMB_CACHE_DIR": cache},
        timeout=600,
    )


def test_a_model_folder_in_a_base_install_is_one_error_saying_what_to_install(tmp_path):
    # Base install (no torch, transformers, onnx): a model folder cannot be embedded; the user
    # gets one error naming the extra and the torch-free way, not a warning and then another.
    code = (
        "from ctxemb_core import Embedder, contract_for\n"
        "Embedder(contract_for('sentence-transformers/all-MiniLM-L6-v2')).embed_query('x')\n"
    )
    gone = ("torch", "transformers", "onnx", "safetensors", "sentence_transformers")
    done = _run_without(gone, code, str(tmp_path / "cache"))
    assert done.returncode == 1
    assert "Warning" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ctxemb_core.errors.MissingDependencyError:")
    assert "pip install 'ctxemb[torch]'" in last and "Embedder.from_export" in last


@pytest.mark.heavy
def test_the_torch_fallback_is_reported_once_per_process(tmp_path):
    # [chroma] + the model package brings torch and transformers but not onnx: the torch backend
    # serves, and says so once, however many embedders of that model the process builds.
    code = (
        "import warnings\n"
        "from ctxemb_core import Embedder, contract_for\n"
        "c = contract_for('sentence-transformers/all-MiniLM-L6-v2')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    for changed in (c, c.with_(pooling='cls'), c.with_(query_prefix='q: ')):\n"
        "        assert Embedder(changed).backend == 'torch'\n"
        "print(sum(\"backend='auto'\" in str(w.message) for w in caught))\n"
    )
    done = _run_without(("onnx",), code, str(tmp_path / "cache"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "1"
