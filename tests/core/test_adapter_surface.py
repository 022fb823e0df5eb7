"""The surface adapters build on: core's public modules, and ``ctxemb_chroma``'s shared guard.

An adapter (``integrations/ctxemb_*``) is thin: it translates its framework's types into calls on
``ctxemb_core``. What it may call is declared here, module by module, and every file under
``integrations/`` is parsed (imports inside functions included; under ``if TYPE_CHECKING:``
too) so that an adapter reaching past the surface fails this test, not a user's upgrade:

- no adapter imports an underscore-prefixed core module (``ctxemb_core._validate``) or an
  underscore-prefixed name from core (``from ctxemb_core.guard import _x``);
- every core module an adapter imports is one of :data:`CORE_SURFACE`;
- the framework adapters use ``ctxemb_chroma`` (the shared Chroma guard) through the names it
  declares for them (:data:`SHARED_CHROMA_GUARD`, all in its ``__all__``), never its private
  modules; the guard imports neither framework adapter, and they do not import each other;
- no adapter's modules import each other in a circle (imports inside functions count; those
  under ``if TYPE_CHECKING:`` do not, as they never run).
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

INTEGRATIONS = Path(__file__).resolve().parents[2] / "integrations"

#: The core modules an adapter may import, with what each gives it (DESIGN terms).
CORE_SURFACE = {
    "ctxemb_core": "the short public API: Embedder, EmbeddingContract, IndexStamp, contract_for",
    "ctxemb_core.contract": "the recipe: the frozen contract, its fingerprint and diff",
    "ctxemb_core.errors": "the one error tree, raised as it is through every adapter",
    "ctxemb_core.embedder": "Embedder(contract): both roles, batches planned from token counts",
    "ctxemb_core.lazy": "LazyEmbedder: a framework component's embedder, loaded on first use",
    "ctxemb_core.components": "a framework component's contract, its model and their arguments",
    "ctxemb_core.cache": "the contract-keyed embedding cache",
    "ctxemb_core.validate": "the shared argument checks (texts, batches, counts)",
    "ctxemb_core.stamp": "what an index remembers: the stamp and its canary",
    "ctxemb_core.guard": "the guard's names, one import for the four modules below",
    "ctxemb_core.records": "stored records against the contract: stored form, similarity, samples",
    "ctxemb_core.stamp_guard": "the stamp's life cycle: open, verify, adopt, re-stamp",
    "ctxemb_core.undo": "writes undone whole when they fail or are interrupted",
    "ctxemb_core.documents": "document-level stamps for stores without collection metadata",
    "ctxemb_core.verified": "which stored records an open re-embeds, by what changed since",
    "ctxemb_core.sync": "indexing as a sync by id and text digest",
    "ctxemb_core.migrate": "the resumable copy loop",
    "ctxemb_core.redact": "a DSN's password masked in what an adapter prints or raises",
    "ctxemb_core.remedy": "an error's next step as data, and the store's terms to word it in",
    "ctxemb_core.detect": "which contract made an unstamped index's vectors",
    "ctxemb_core.store_tools": "what every store adapter shares: its tools, API names, errors",
    "ctxemb_core.aliases": "aliases: the record a store keeps, its book and catalog protocols",
    "ctxemb_core.shards": "a corpus as shards that workers read themselves",
    "ctxemb_core.eval.paths": "the evaluation path protocol and its argument checks",
    "ctxemb_core.eval.guarded": "the evaluation path through a store's guarded index",
    "ctxemb_core.eval.frameworks": "the evaluation path through a framework's stores",
    "ctxemb_core.rerank": "reranker contracts, rerankers, two-stage search",
    "ctxemb_core.rerank.search": "the shortlist a store's two-stage search builds from its result",
    "ctxemb_core.cli.stores": "the CLI's store protocol: what a store's command-line options give",
    "ctxemb_core.hybrid": "the hybrid contract: lexical recipe, fusion, BM25 index, stamped files",
    "ctxemb_core.hybrid.guard": "the hybrid checks: caller against stamp, analyzer, sides in step",
    "ctxemb_core.hybrid.pair": "a guarded dense index and its lexical side, kept in step",
    "ctxemb_core.hybrid.store": "the lexical side's store: SQLite, or a dialect an adapter gives",
    "ctxemb_core.index": "the store driver protocol and the guarded index over any driver",
    "ctxemb_core.index.driver": "what a store driver offers: primitives, capabilities, records",
    "ctxemb_core.index.driver_kit": "what a driver is built from: reads/writes by id, records",
    "ctxemb_core.index.connecting": "a store reached over the network: its address, checked",
    "ctxemb_core.index.embedded": "an embedded store's folder; the write mark in its SQLite file",
    "ctxemb_core.index.armed": "failures a raw client arms for a driver's next write (tests)",
    "ctxemb_core.index.payloads": "a record kept as a JSON payload: its layout, the store's order",
    "ctxemb_core.index.shaped": "Chroma's result shapes (query, get) over any guarded index",
}

#: What ``ctxemb_haystack`` and ``ctxemb_langchain`` may import from ``ctxemb_chroma``.
SHARED_CHROMA_GUARD = frozenset(
    {
        "ChromaDriver",
        "GuardedCollection",
        "check_metadatas",
        "connect",
        "open_collection",
        "open_hybrid",
        "stored_or_none",
    }
)
#: What they may import from ``ctxemb_pgvector``, the shared pgvector guard.
SHARED_PG_GUARD = frozenset(
    {
        "GuardedTable",
        "PgvectorDriver",
        "check_name",
        "connect",
        "open_hybrid",
        "open_table",
        "stored_or_none",
    }
)
#: The store adapters the framework adapters build on, and the names each declares for them.
SHARED_GUARDS = {"ctxemb_chroma": SHARED_CHROMA_GUARD, "ctxemb_pgvector": SHARED_PG_GUARD}
#: What the store adapters may import from ``ctxemb_ray``, the Ray integration: the maker of
#: their ``index_with_ray`` and its summary. The one session every store's actors reopen it
#: with (the adapter's name and its calls' keywords) is made by core's CLI from the store's
#: options (``options_of``'s ``ray_session``), so no adapter builds it. ``ctxemb_ray`` itself
#: imports ``ctxemb_core`` alone (it knows no store: a session imports its adapter by the name
#: it holds), so it runs over any driver; a store adapter writes no session class of its own.
SHARED_RAY = frozenset({"IndexSummary", "index_with_ray_for"})
#: The integrations that build on core alone: they import no other adapter.
OVER_CORE_ONLY = ("ctxemb_ray",)

ADAPTERS = (
    "ctxemb_chroma",
    "ctxemb_pgvector",
    "ctxemb_haystack",
    "ctxemb_langchain",
    "ctxemb_llamaindex",
    *OVER_CORE_ONLY,
)


@dataclass(frozen=True)
class Imported:
    """One imported module (and, for ``from m import a, b``, the names) at one line."""

    file: str
    line: int
    module: str
    names: tuple[str, ...] = ()


def imports_of(source: str, file: str, package: str) -> list[Imported]:
    """Every absolute import in ``source`` (relative ones resolved within ``package``), at any
    depth: module level, inside functions, under ``if TYPE_CHECKING:``, and the module names
    given to ``importlib.import_module``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [Imported(file, node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                module = ".".join([package, *([module] if module else [])])
            found.append(Imported(file, node.lineno, module, tuple(a.name for a in node.names)))
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append(Imported(file, node.lineno, node.args[0].value))
    return found


def runtime_imports(source: str, package: str) -> set[str]:
    """The modules ``source`` imports when it runs: as :func:`imports_of`, without the imports
    under ``if TYPE_CHECKING:``, and with ``from pkg import mod`` as the module ``pkg.mod``."""
    tree = ast.parse(source)
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for n in ast.walk(stmt)
    }
    out = set()
    for imp_node in ast.walk(tree):
        if id(imp_node) in typing_only:
            continue
        if isinstance(imp_node, ast.Import):
            out |= {a.name for a in imp_node.names}
        elif isinstance(imp_node, ast.ImportFrom):
            module = imp_node.module or ""
            if imp_node.level:
                module = ".".join([package, *([module] if module else [])])
            out.add(module)
            out |= {f"{module}.{a.name}" for a in imp_node.names}
    return out


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def adapter_graph(adapter: str) -> dict[str, set[str]]:
    """Which of the adapter's modules each of its modules imports when it runs."""
    modules = {}
    for path in sorted((INTEGRATIONS / adapter).rglob("*.py")):
        rel = path.relative_to(INTEGRATIONS).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        modules[name] = path
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        found = runtime_imports(path.read_text(encoding="utf-8"), package)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def adapter_imports(adapter: str) -> list[Imported]:
    files = sorted((INTEGRATIONS / adapter).rglob("*.py"))
    assert files, f"no files under {INTEGRATIONS / adapter}"
    found = []
    for path in files:
        where = str(path.relative_to(INTEGRATIONS))
        found += imports_of(path.read_text(encoding="utf-8"), where, adapter)
    return found


def _private_part(module: str) -> str | None:
    return next((p for p in module.split(".") if p.startswith("_")), None)


def surface_breaches(found: list[Imported]) -> list[str]:
    """What in ``found`` reaches past the core surface: a private module or name, or a module
    the surface does not declare."""
    out = []
    for imp in found:
        if imp.module.split(".")[0] != "ctxemb_core":
            continue
        at = f"{imp.file}:{imp.line}"
        # ``from ctxemb_core import eval`` names a module; check it as one.
        modules = [imp.module]
        if imp.names and imp.module == "ctxemb_core":
            modules += [f"ctxemb_core.{n}" for n in imp.names if n in _core_subpackages()]
        for module in modules:
            if _private_part(module):
                out.append(f"{at}: imports private core module {module}")
            elif module not in CORE_SURFACE:
                out.append(f"{at}: imports {module}, which is not in the adapter surface")
        out += [
            f"{at}: imports private name {n} from {imp.module}"
            for n in imp.names
            if n.startswith("_")
        ]
    return out


def _core_subpackages() -> set[str]:
    core = INTEGRATIONS.parent / "ctxemb_core"
    return {p.stem for p in core.glob("*.py")} | {p.name for p in core.iterdir() if p.is_dir()}


def cross_adapter_breaches(adapter: str, found: list[Imported]) -> list[str]:
    """Imports of another adapter that the design does not allow from ``adapter``."""
    out = []
    for imp in found:
        top = imp.module.split(".")[0]
        if top == adapter or top not in ADAPTERS:
            continue
        at = f"{imp.file}:{imp.line}"
        if adapter in OVER_CORE_ONLY:
            out.append(f"{at}: {adapter} imports {imp.module}; it builds on ctxemb_core alone")
        elif top == "ctxemb_ray":
            if adapter not in SHARED_GUARDS:
                out.append(f"{at}: {adapter} imports {imp.module}; only a store adapter may")
            elif imp.module != top or not imp.names:
                out.append(f"{at}: imports {imp.module}; use the names of {top} itself")
            out += [
                f"{at}: imports {n} from {top}, not a name it gives the store adapters"
                for n in imp.names
                if n not in SHARED_RAY
            ]
        elif top not in SHARED_GUARDS or adapter in SHARED_GUARDS:
            out.append(
                f"{at}: {adapter} imports {imp.module}; only the store guards are shared, "
                "with the framework adapters"
            )
        elif imp.module != top or not imp.names:
            out.append(f"{at}: imports {imp.module}; use the names of {top} itself")
        else:
            out += [
                f"{at}: imports {n} from {top}, not a name of the shared {top} guard"
                for n in imp.names
                if n not in SHARED_GUARDS[top]
            ]
    return out


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_adapter_imports_only_the_declared_public_core_surface(adapter):
    assert surface_breaches(adapter_imports(adapter)) == []


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_adapter_uses_another_only_as_the_shared_chroma_guard(adapter):
    assert cross_adapter_breaches(adapter, adapter_imports(adapter)) == []


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_an_adapter_has_no_import_circle(adapter):
    assert import_circles(adapter_graph(adapter)) == []


def test_the_circle_finder_finds_circles_through_functions_not_type_checking():
    a = "def f():\n    from pkg import b\n"
    b = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg.c import X\n"
        "import pkg.a\n"
    )
    graph = {
        "pkg.a": runtime_imports(a, "pkg") & {"pkg.b", "pkg.c"},
        "pkg.b": runtime_imports(b, "pkg") & {"pkg.a", "pkg.c"},
        "pkg.c": {"pkg.b"},
    }
    assert graph["pkg.b"] == {"pkg.a"}
    assert import_circles(graph) == [["pkg.a", "pkg.b"]]


def test_the_framework_adapters_do_build_on_the_shared_guard():
    # The declaration is not empty words: both use it, and between them every name of it.
    used: set[str] = set()
    for adapter in ("ctxemb_haystack", "ctxemb_langchain"):
        names = {
            n
            for imp in adapter_imports(adapter)
            if imp.module == "ctxemb_chroma"
            for n in imp.names
        }
        assert names, f"{adapter} no longer uses ctxemb_chroma: update SHARED_CHROMA_GUARD"
        used |= names
    assert used == SHARED_CHROMA_GUARD


def test_the_framework_adapters_do_build_on_the_shared_pgvector_guard():
    used = {
        n
        for adapter in ("ctxemb_haystack", "ctxemb_langchain")
        for imp in adapter_imports(adapter)
        if imp.module == "ctxemb_pgvector"
        for n in imp.names
    }
    assert used == SHARED_PG_GUARD


def test_the_shared_pgvector_guard_is_public_and_documented_as_such():
    ctxemb_pgvector = pytest.importorskip("ctxemb_pgvector")
    assert set(ctxemb_pgvector.__all__) >= SHARED_PG_GUARD
    doc = ctxemb_pgvector.__doc__ or ""
    assert "shared pgvector guard" in doc
    for name in SHARED_PG_GUARD:
        assert f"`{name}`" in doc, name


def test_the_shared_guard_is_public_and_documented_as_such():
    ctxemb_chroma = pytest.importorskip("ctxemb_chroma")
    assert set(ctxemb_chroma.__all__) >= SHARED_CHROMA_GUARD
    doc = ctxemb_chroma.__doc__ or ""
    assert "shared Chroma guard" in doc
    for name in SHARED_CHROMA_GUARD:
        assert f"`{name}`" in doc, name
        assert not getattr(ctxemb_chroma, name).__name__.startswith("_")


@pytest.mark.parametrize("module", sorted(CORE_SURFACE))
def test_every_surface_module_is_public_and_imports(module):
    assert _private_part(module) is None
    loaded = importlib.import_module(module)
    assert loaded.__doc__, f"{module} has no docstring to say what it gives adapters"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("ctxemb_core._validate", "ctxemb_core.validate"),
        ("ctxemb_core._shards", "ctxemb_core.shards"),
    ],
)
def test_the_old_private_paths_still_give_the_same_objects(old, new):
    # Kept for this release: code importing the old names keeps working, with the same objects.
    before, after = importlib.import_module(old), importlib.import_module(new)
    assert before.__all__ == after.__all__
    for name in after.__all__:
        assert getattr(before, name) is getattr(after, name), name


def test_the_scan_finds_what_it_must_refuse():
    # The checks above pass on the tree; this proves they would fail on a breach.
    source = """
from typing import TYPE_CHECKING
from ctxemb_core import Embedder, eval
from ctxemb_core.guard import _private
import ctxemb_core._files
if TYPE_CHECKING:
    from ctxemb_core.resolve import read_layout
def later():
    from ctxemb_core._batches import plan_batches
    from ctxemb_chroma._store import translated
    from ctxemb_chroma import open_collection, restamp
    from ctxemb_langchain import ContractChroma
    importlib.import_module("ctxemb_core._validate")
"""
    found = imports_of(source, "x.py", "ctxemb_haystack")
    surface = "\n".join(surface_breaches(found))
    for breach in (
        "x.py:3: imports ctxemb_core.eval, which is not",
        "private name _private from ctxemb_core.guard",
        "private core module ctxemb_core._files",
        "ctxemb_core.resolve, which is not",
        "private core module ctxemb_core._batches",
        "x.py:13: imports private core module ctxemb_core._validate",
    ):
        assert breach in surface
    assert "Embedder" not in surface
    cross = "\n".join(cross_adapter_breaches("ctxemb_haystack", found))
    for breach in (
        "imports ctxemb_chroma._store; use the names",
        "imports restamp from ctxemb_chroma, not a name",
        "ctxemb_haystack imports ctxemb_langchain",
    ):
        assert breach in cross
    assert "open_collection" not in cross
    chroma = cross_adapter_breaches("ctxemb_chroma", found)
    assert any("ctxemb_chroma imports ctxemb_langchain" in b for b in chroma)


def test_the_scan_refuses_what_the_ray_integration_must_not_import_nor_give():
    source = """
from ctxemb_chroma import open_collection
from ctxemb_ray import AdapterSession, DriverSession, run_job
from ctxemb_ray._job import IndexSummary
def open():
    return importlib.import_module("ctxemb_pgvector")
"""
    found = imports_of(source, "x.py", "ctxemb_ray")
    ray = "\n".join(cross_adapter_breaches("ctxemb_ray", found))
    assert "x.py:2: ctxemb_ray imports ctxemb_chroma; it builds on ctxemb_core alone" in ray
    assert "x.py:6: ctxemb_ray imports ctxemb_pgvector; it builds on" in ray  # even in a call
    store = "\n".join(cross_adapter_breaches("ctxemb_pgvector", found))
    assert "imports run_job from ctxemb_ray, not a name" in store
    # A store's session is ctxemb_ray's one class: an adapter writes no DriverSession of its own.
    assert "imports DriverSession from ctxemb_ray, not a name" in store
    assert "imports ctxemb_ray._job; use the names of ctxemb_ray itself" in store
    # Its session too is made for it (core's CLI, from its options): no adapter builds one.
    assert "imports AdapterSession from ctxemb_ray, not a name" in store
    framework = "\n".join(cross_adapter_breaches("ctxemb_langchain", found))
    assert "ctxemb_langchain imports ctxemb_ray; only a store adapter may" in framework


def test_the_store_adapters_build_their_ray_jobs_on_the_ray_integration():
    # Ray is no part of core (ctxemb_core imports no framework): the job is ctxemb_ray's, and so
    # are the session and the public index_with_ray; each store adapter gives only its keywords.
    assert not (INTEGRATIONS.parent / "ctxemb_core" / "scaleout").exists()
    for adapter in SHARED_GUARDS:
        names = {
            n for imp in adapter_imports(adapter) if imp.module == "ctxemb_ray" for n in imp.names
        }
        assert names == SHARED_RAY, adapter
    ctxemb_ray = pytest.importorskip("ctxemb_ray")
    assert set(ctxemb_ray.__all__) >= SHARED_RAY | {"AdapterSession"}
    # Each store's --ray session is core's, from what its options say every actor connects with.
    from ctxemb_core.cli.stores import store_options

    for store in SHARED_GUARDS:
        options = store_options(store.removeprefix("ctxemb_"))
        assert options.ray_session.__module__ == "ctxemb_core.cli.stores", store
