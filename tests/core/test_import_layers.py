"""The import layers of ctxemb (issue 26): imports point down, and a torch-free install is a
folder boundary, not a convention.

* No import circle in ``ctxemb_core`` or ``integrations/ctxemb_*`` but ``contract`` <-> ``errors``
  (errors carry contracts by design); imports inside functions count, ``if TYPE_CHECKING:``
  imports do not, exactly as ``/work/shared/hooks/circles.py`` counts them.
* ``ctxemb_core`` imports no framework (Ray, Chroma, PostgreSQL's driver, Haystack, LangChain)
  and no integration, at any depth: those live under ``integrations/``; ``ctxemb_ray`` (the Ray
  job) imports ``ctxemb_core`` alone.
* ``ctxemb_core.folders`` (every on-disk format) imports only ``contract``, ``errors`` and
  ``_files`` of ctxemb_core; the backends import nothing above them.
* With ``torch``, ``transformers`` and ``onnx`` refused at import, everything a base install
  loads for the static and the export paths imports, and serves a static folder and an export.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ctxemb_core import Embedder, contract_for
from ctxemb_core.export import export_model
from ctxemb_core.static import static_from_vectors

REPO = Path(__file__).resolve().parents[2]

ALLOWED_CIRCLE = frozenset({"ctxemb_core.contract", "ctxemb_core.errors"})

# What the model-folder layer may import of ctxemb_core (besides its own modules).
FOLDERS_MAY_IMPORT = frozenset({"ctxemb_core.contract", "ctxemb_core.errors", "ctxemb_core._files"})
# What the backends may import of ctxemb_core (besides each other): the layers below them.
BACKENDS_MAY_IMPORT = FOLDERS_MAY_IMPORT | {
    "ctxemb_core._batches",
    "ctxemb_core._validate",
    "ctxemb_core.pooling",
}


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for base in (REPO, REPO / "integrations"):
        for top in sorted(os.listdir(base)):
            if top != "ctxemb_core" and not (
                base.name == "integrations" and top.startswith("ctxemb_")
            ):
                continue
            for path in sorted((base / top).rglob("*.py")):
                name = ".".join(path.relative_to(base).with_suffix("").parts)
                mods[name.removesuffix(".__init__")] = path
    return mods


def _graph() -> dict[str, set[str]]:
    """Module -> the modules it imports (at any depth of its code), as circles.py builds it."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = {
            node.lineno
            for branch in ast.walk(tree)
            if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
            for statement in branch.body
            for node in ast.walk(statement)
            if hasattr(node, "lineno")
        }
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                names = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names
                ]
            for target in names:
                while target and target not in mods:
                    target = target.rsplit(".", 1)[0] if "." in target else ""
                if target and target != module:
                    graph[module].add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(component)
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """The import graph of the tree on disk, parsed once (a second) for the tests that read it."""
    return _graph()


def test_no_import_circle_but_contract_and_errors(graph):
    circles = [c for c in _circles(graph) if c != ALLOWED_CIRCLE]
    assert circles == [], [" <-> ".join(sorted(c)) for c in circles]


def test_the_circle_finder_finds_a_circle():
    # The test above proves nothing if the finder misses circles.
    found = _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert found == [{"a", "b", "c"}]


#: What ctxemb_core never imports (the top-level names): frameworks and stores' client
#: libraries belong to the integrations, which core loads by name only (``importlib``).
FRAMEWORKS = frozenset(
    {
        "ray",
        "chromadb",
        "psycopg",
        "pgvector",
        "haystack",
        "langchain",
        "langchain_core",
        "langchain_chroma",
        "langchain_postgres",
        "sentence_transformers",
    }
)


def _external_imports(path: Path) -> set[str]:
    """The top-level names of every absolute import in ``path``, at any depth (``if
    TYPE_CHECKING:`` too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_core_imports_no_framework_nor_integration_at_any_depth():
    integrations = {p.name for p in (REPO / "integrations").glob("ctxemb_*")}
    assert "ctxemb_ray" in integrations
    wrong = {
        name: sorted(_external_imports(path) & (FRAMEWORKS | integrations))
        for name, path in _modules().items()
        if name.split(".")[0] == "ctxemb_core"
    }
    assert {m: w for m, w in wrong.items() if w} == {}


def test_the_ray_integration_imports_only_core(graph):
    ray = {m: t for m, t in graph.items() if m.split(".")[0] == "ctxemb_ray"}
    assert "ctxemb_ray._job" in ray and "ctxemb_ray._actors" in ray
    assert {
        m: sorted(x for x in t if x.split(".")[0] not in ("ctxemb_core", "ctxemb_ray"))
        for m, t in ray.items()
    } == {m: [] for m in ray}
    # Nothing in core imports it (the CLI's --ray loads it by name), nor does a framework adapter.
    users = {m for m, t in graph.items() if any(x.split(".")[0] == "ctxemb_ray" for x in t)}
    assert {u.split(".")[0] for u in users} <= {"ctxemb_ray", "ctxemb_chroma", "ctxemb_pgvector"}


def _core_imports(graph: dict[str, set[str]], prefix: str) -> dict[str, set[str]]:
    """The ctxemb_core modules outside ``prefix`` that each module under ``prefix`` imports."""
    return {
        module: {t for t in targets if t.startswith("ctxemb_core") and not t.startswith(prefix)}
        for module, targets in graph.items()
        if module == prefix.rstrip(".") or module.startswith(prefix)
    }


def test_the_folders_layer_imports_only_contract_errors_and_files(graph):
    imports = _core_imports(graph, "ctxemb_core.folders.")
    assert "ctxemb_core.folders.locate" in imports  # the layer is there
    above = {
        m: sorted(t - FOLDERS_MAY_IMPORT) for m, t in imports.items() if t - FOLDERS_MAY_IMPORT
    }
    assert above == {}


def test_the_backends_import_nothing_above_them(graph):
    imports = _core_imports(graph, "ctxemb_core.backends.")
    assert "ctxemb_core.backends.onnx" in imports
    above = {
        m: sorted(
            t
            for t in targets
            if t not in BACKENDS_MAY_IMPORT and not t.startswith("ctxemb_core.folders")
        )
        for m, targets in imports.items()
    }
    assert {m: t for m, t in above.items() if t} == {}


def test_resolve_and_pooling_read_folders_through_the_folders_layer(graph):
    # resolve is folder -> contract: no writer (static, export) or embedder above it.
    above = {"ctxemb_core.static", "ctxemb_core.export", "ctxemb_core.embedder", "ctxemb_core"}
    assert graph["ctxemb_core.resolve"] & above == set()
    assert not any(t.startswith("ctxemb_core.backends") for t in graph["ctxemb_core.pooling"])
    # Only the build module imports the export build: the runtime loads it lazily, when needed.
    users = {m for m, targets in graph.items() if "ctxemb_core.backends.onnx_build" in targets}
    assert users == {"ctxemb_core.backends.onnx_cache"}


# The store layer (issue 44): the driver protocol, the guarded index over it, the reference driver
# and the conformance suite, on the guard's layer (records, stamp_guard, undo, validate, sync,
# verified, migrate) and below the tools. A store adapter is a driver that imports this layer,
# never the other way round; nothing above the guard (the tools, the command, the server,
# evaluation) is imported.
STORE_LAYER = ("ctxemb_core.index", "ctxemb_core.testing")
ABOVE_THE_STORE_LAYER = (
    "ctxemb_core.cli",
    "ctxemb_core.serve",
    "ctxemb_core.eval",
    "ctxemb_core.demo",
    "ctxemb_core.hybrid",
    "ctxemb_core.detect",
    "ctxemb_core.rerank",
)


def test_the_store_layer_imports_no_adapter_and_nothing_above_the_guard(graph):
    layer = {m: t for m, t in graph.items() if m.startswith(STORE_LAYER)}
    assert "ctxemb_core.index.guarded" in layer and "ctxemb_core.testing.conformance" in layer
    wrong = {
        m: sorted(
            t
            for t in targets
            if not t.startswith("ctxemb_core")
            or t.startswith(ABOVE_THE_STORE_LAYER)
            or t == "ctxemb_core"
        )
        for m, targets in layer.items()
    }
    assert {m: t for m, t in wrong.items() if t} == {}
    # The protocol a store implements depends on the error tree alone.
    assert graph["ctxemb_core.index.driver"] == {"ctxemb_core.errors"}
    # The suite imports pytest: nothing but a store's tests may import it.
    users = {m for m, t in graph.items() if "ctxemb_core.testing.conformance" in t}
    assert {u for u in users if not u.startswith("ctxemb_core.testing")} == set()


# The guard by concern (issue 44, item 7): one module per job, and ``ctxemb_core.guard`` only
# names their functions for the adapters that import them from there. Each job imports the
# layers below it, never another job above it nor the store layer.
GUARD_CONCERNS = {
    "ctxemb_core.validate": {"ctxemb_core.errors"},  # argument checks: the error tree alone
    "ctxemb_core.undo": {"ctxemb_core.errors"},  # undoable writes: the error tree alone
    # Stored records against the contract: below the Embedder (it takes one, never builds one).
    "ctxemb_core.records": {
        "ctxemb_core._batches",
        "ctxemb_core.contract",
        "ctxemb_core.errors",
        "ctxemb_core.pooling",
        "ctxemb_core.stamp",
    },
    # The stamp's life cycle: the Embedder, the stamp and the record checks.
    "ctxemb_core.stamp_guard": {
        "ctxemb_core.contract",
        "ctxemb_core.embedder",
        "ctxemb_core.errors",
        "ctxemb_core.records",
        "ctxemb_core.stamp",
    },
}


def test_the_guard_is_split_by_concern_and_names_them_only(graph):
    assert graph["ctxemb_core.guard"] == set(GUARD_CONCERNS)
    wrong = {m: sorted(graph[m] - allowed) for m, allowed in GUARD_CONCERNS.items()}
    assert {m: t for m, t in wrong.items() if t} == {}
    # Core imports each job from its own module; the old one is the adapters' name for them.
    users = {m for m, t in graph.items() if "ctxemb_core.guard" in t}
    assert {u for u in users if u.startswith("ctxemb_core")} == set()
    # The verified-open records (ids or a write mark) need only the sampling plan.
    assert graph["ctxemb_core.verified"] == {"ctxemb_core._files", "ctxemb_core.records"}


def test_every_dense_activation_the_format_accepts_is_computed():
    from ctxemb_core import pooling
    from ctxemb_core.folders.st_modules import DENSE_ACTIVATIONS

    assert sorted(pooling._ACTIVATIONS) == sorted(DENSE_ACTIVATIONS)


# -- a torch-free install ----------------------------------------------------------------------

TORCH_FREE = r"""
import importlib, json, pkgutil, sys

REFUSED = {"torch", "transformers", "onnx"}


class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"{name} is refused: a torch-free install", name=name)
        return None


sys.meta_path.insert(0, Refuse())
import ctxemb_core.folders

modules = ["ctxemb_core", "ctxemb_core.folders"] + [
    "ctxemb_core.folders." + m.name for m in pkgutil.iter_modules(ctxemb_core.folders.__path__)
] + [
    "ctxemb_core.resolve", "ctxemb_core.pooling", "ctxemb_core.cache",
    "ctxemb_core.backends", "ctxemb_core.backends.base", "ctxemb_core.backends._tokenize",
    "ctxemb_core.backends.ort", "ctxemb_core.backends.onnx_recipes",
    "ctxemb_core.backends.onnx_cache", "ctxemb_core.backends.onnx",
    "ctxemb_core.backends.static", "ctxemb_core.backends.exported",
    "ctxemb_core.embedder", "ctxemb_core.lazy", "ctxemb_core.guard", "ctxemb_core.stamp",
    "ctxemb_core.records", "ctxemb_core.stamp_guard", "ctxemb_core.undo",
    "ctxemb_core.detect", "ctxemb_core.documents", "ctxemb_core.export", "ctxemb_core.static",
    "ctxemb_core.index", "ctxemb_core.index.memory", "ctxemb_core.index.guarded",
]
for name in modules:
    importlib.import_module(name)

from ctxemb_core import Embedder, contract_for

static_folder, export_folder, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
out = {}
for key, folder in (("static", static_folder), ("export", export_folder)):
    contract = contract_for(folder)
    embedder = Embedder(contract)
    out[key] = {
        "fingerprint": contract.fingerprint,
        "backend": embedder.backend,
        "vectors": embedder.embed_documents(texts).tolist(),
    }
out["loaded"] = sorted(
    m for m in sys.modules
    if m.split(".")[0] in REFUSED or m == "ctxemb_core.backends.onnx_build"
)
print(json.dumps(out))
"""

TEXTS = ["the river bank", "a bank account", "unknown words only: zzz"]


def test_a_torch_free_install_serves_a_static_folder_and_an_export(tmp_path, tiny_bert):
    vectors = tmp_path / "words.txt"
    rng = np.random.default_rng(7)
    words = ["the", "river", "bank", "a", "account", "words", "only"]
    vectors.write_text(
        "".join(f"{w} {' '.join(f'{v:.4f}' for v in rng.normal(size=8))}\n" for w in words),
        encoding="utf-8",
    )
    static_folder = static_from_vectors(vectors, tmp_path / "static")
    export_folder = export_model(contract_for(tiny_bert, pooling="mean"), tmp_path / "export")
    want = {
        key: (
            contract_for(folder).fingerprint,
            Embedder(contract_for(folder)).embed_documents(TEXTS),
        )
        for key, folder in (("static", static_folder), ("export", export_folder))
    }
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            TORCH_FREE,
            str(static_folder),
            str(export_folder),
            json.dumps(TEXTS),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "integrations")])},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout)
    assert got["loaded"] == []  # no torch, transformers, onnx, nor the export build
    assert got["static"]["backend"] == "static" and got["export"]["backend"] == "onnx"
    for key, (fingerprint, vectors_there) in want.items():
        assert got[key]["fingerprint"] == fingerprint
        np.testing.assert_allclose(np.array(got[key]["vectors"]), vectors_there, atol=1e-6)
