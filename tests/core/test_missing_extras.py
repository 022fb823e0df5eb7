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


def test_index_ray_without_ray_is_one_typed_error_before_any_store(tmp_path):
    # Ray is imported only when a job runs (core imports none): without it, `ctxemb index
    # --ray` says what to install before the store is reached (nothing listens on port 9).
    code = (
        "import sys\n"
        "from ctxemb_core.cli import main\n"
        "from ctxemb_core.demo import corpus_path\n"
        "sys.exit(main(['index', str(corpus_path()), '--collection', 'docs', '--ray',\n"
        "               '--host', '127.0.0.1', '--port', '9', '--no-cache']))\n"
    )
    done = _run_without(("ray",), code, str(tmp_path / "cache"))
    assert done.returncode == 2, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ctxemb: error: MissingDependencyError: distributed indexing needs Ray")
    assert "pip install 'ctxemb[ray]'" in last and "Traceback" not in done.stderr


def test_the_core_cli_loads_the_ray_integration_by_name_with_a_typed_error(monkeypatch):
    # Core imports no integration: `--ray` loads ctxemb_ray by name, as the stores' adapters.
    import sys

    from ctxemb_core.cli import common
    from ctxemb_core.errors import MissingDependencyError

    assert common.ray_integration() is sys.modules["ctxemb_ray"]
    monkeypatch.setitem(sys.modules, "ctxemb_ray", None)  # as if it were not installed
    with pytest.raises(MissingDependencyError, match=r"--ray needs the Ray integration"):
        common.ray_integration()
