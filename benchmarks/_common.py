"""Helpers shared by the benchmarks: data location, machine facts, result files."""

from __future__ import annotations

import argparse
import contextlib
import gzip
import importlib.metadata
import itertools
import json
import os
import platform
import re
import shlex
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

#: The repository root (``benchmarks/`` sits directly under it).
REPO = Path(__file__).resolve().parents[1]
#: Evaluation data lives beside the repository, never inside it.
DEFAULT_DATA = REPO.parent / "shared" / "data"
RESULTS = REPO / "benchmarks" / "results"
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def offline() -> None:
    """No model hub at run time: make any accidental hub lookup fail fast."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def quiet_truncation() -> None:
    """No TruncationWarning per batch: SciFact's long abstracts are cut at 256 tokens by design."""
    from ctxemb_core.errors import TruncationWarning

    warnings.filterwarnings("ignore", category=TruncationWarning)


def scifact_texts(data: Path, n: int) -> list[str]:
    """The first ``n`` SciFact documents, BEIR-style ``title + " " + text``."""
    path = data / "scifact" / "corpus.jsonl.gz"
    if not path.is_file():
        raise SystemExit(f"{path} not found; pass --data pointing at the shared data folder")
    texts: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            texts.append((doc.get("title", "") + " " + doc.get("text", "")).strip())
            if len(texts) == n:
                break
    return texts


#: How many words of each text a ``--quick`` run keeps (:func:`quick_texts`).
QUICK_WORDS = 32


def quick_texts(texts: list[str]) -> list[str]:
    """Each text cut to its first :data:`QUICK_WORDS` words, for a ``--quick`` run.

    SciFact documents run to 256 tokens and more (512 in a cross-encoder pair), and a quick
    run is a check of the code paths, not a measurement: a few dozen tokens a text run the same
    code for a fraction of the model's work.
    """
    return [" ".join(text.split()[:QUICK_WORDS]) for text in texts]


#: The instruction sets whose presence changes how fast a float, bf16 or int8 network runs,
#: as ``/proc/cpuinfo`` spells them.
CPU_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
)


def machine_info() -> dict[str, Any]:
    """Facts about the machine and library versions that figures depend on.

    The CPU is one block, ``"cpu"`` (see :func:`cpu_info`); ``"onnxruntime"`` and ``"torch"``
    are the installed versions (``None`` when not installed). Nothing heavy is imported here:
    a version comes from the loaded module or the installed package's metadata, and torch's
    thread counts are reported only when torch is already loaded, so a torch-free process
    stays torch-free. ``cpu_count`` and ``cpu_model`` repeat ``cpu.cores`` and
    ``cpu.model_name`` for the scripts that print them.
    """
    cpu = cpu_info()
    info: dict[str, Any] = {
        "cpu": cpu,
        "cpu_label": cpu_label(cpu),
        "cpu_count": cpu["cores"],
        "cpu_model": cpu["model_name"],
        "platform": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": _version("onnxruntime"),
        "torch": _version("torch"),
        "numpy": _version("numpy"),
        "transformers": _version("transformers"),
        "sentence_transformers": _version("sentence_transformers", "sentence-transformers"),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
        info["torch_interop_threads"] = torch.get_num_interop_threads()
    # A run given more of a shared machine (`nice`, or its session's autogroup, which is what
    # counts between sessions when the kernel groups them) says so.
    if hasattr(os, "getpriority"):
        info["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
    with contextlib.suppress(OSError, ValueError, IndexError):
        info["autogroup_nice"] = int(Path("/proc/self/autogroup").read_text().split()[-1])
    if hasattr(os, "getloadavg"):
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return info


def cpu_info() -> dict[str, Any]:
    """The CPU as ``/proc/cpuinfo`` and the scheduler describe it.

    Returns ``{"vendor", "model_name", "family", "model", "stepping", "cores",
    "cores_available", "flags"}``: ``cores`` is ``os.cpu_count()``, ``cores_available`` the
    cores this process may run on (its affinity mask), ``flags`` maps each of
    :data:`CPU_FLAGS` to whether the CPU has it. Numbers not known (not Linux) are ``None``.
    """
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break  # the first processor describes them all
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = set(fields.get("flags", "").split())
    try:
        available: int | None = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        available = None
    return {
        "vendor": fields.get("vendor_id"),
        "model_name": fields.get("model name") or platform.processor() or None,
        "family": _number(fields.get("cpu family")),
        "model": _number(fields.get("model")),
        "stepping": _number(fields.get("stepping")),
        "cores": os.cpu_count(),
        "cores_available": available,
        "flags": {flag: flag in flags for flag in CPU_FLAGS},
    }


def cpu_label(cpu: dict[str, Any] | None = None) -> str:
    """The CPU in one line, for printouts and the README's figures table.

    Example: ``"Intel Xeon (family 6 model 167, 2 cores, AVX-512 VNNI, BF16, AMX)"``.
    """
    cpu = cpu if cpu is not None else cpu_info()
    name = re.sub(r"\((R|TM|tm)\)|\bCPU\b|\bProcessor\b|@.*$", " ", cpu["model_name"] or "")
    name = " ".join(name.split()) or "unknown CPU"
    facts = []
    if cpu["family"] is not None and cpu["model"] is not None:
        facts.append(f"family {cpu['family']} model {cpu['model']}")
    cores, available = cpu["cores"], cpu["cores_available"]
    if available is not None and cores is not None and available < cores:
        facts.append(f"{available} of {cores} cores")
    else:
        facts.append(f"{cores} cores")
    flags = cpu["flags"]
    if flags["avx512f"]:
        facts.append("AVX-512 VNNI" if flags["avx512_vnni"] else "AVX-512")
    elif flags["avx2"]:
        facts.append("AVX2")
    if flags["avx_vnni"] and not flags["avx512_vnni"]:
        facts.append("AVX-VNNI")
    if flags["avx512_bf16"]:
        facts.append("BF16")
    if flags["amx_tile"]:
        facts.append("AMX")
    return f"{name} ({', '.join(facts)})"


def _number(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _version(module: str, distribution: str | None = None) -> str | None:
    """A package's version without importing it (the loaded module's, if it is loaded)."""
    loaded = sys.modules.get(module)
    if loaded is not None and isinstance(getattr(loaded, "__version__", None), str):
        return str(loaded.__version__)
    try:
        return importlib.metadata.version(distribution or module)
    except importlib.metadata.PackageNotFoundError:
        return None


def command_line() -> str:
    """The command that reproduces this run, relative to the repository root."""
    script = Path(sys.argv[0]).resolve()
    try:
        script_arg = script.relative_to(REPO).as_posix()
    except ValueError:
        script_arg = str(script)
    return shlex.join([".venv/bin/python", script_arg, *sys.argv[1:]])


def shown(path: Path) -> str:
    """A path as printed: relative to the repository when inside it."""
    try:
        return path.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return str(path)


#: What ``--quick`` is, for every benchmark's ``--help``.
QUICK_HELP = (
    "a check, not a measurement: the same code paths on a tiny workload ({cuts}); "
    "the figures are printed and the result goes to a temporary folder (or --out), never to "
    "benchmarks/results/"
)


def add_quick(parser: argparse.ArgumentParser, cuts: str) -> None:
    """Give a benchmark's parser ``--quick``; ``cuts`` says what the quick run makes smaller.

    ``--quick`` exists so that a test can run every benchmark end to end in seconds (a broken
    import or a renamed function fails it); its figures are not comparable with a full run's.
    """
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP.format(cuts=cuts))


def chunks(n: int, size: int) -> list[slice]:
    """``n`` items cut into slices of ``size`` (the last one shorter)."""
    return [slice(s, min(s + size, n)) for s in range(0, n, size)]


def paired_turns(
    sides: Mapping[str, Callable[[Any], Any]],
    inputs: Mapping[str, Sequence[Any]],
    chunk: int,
    turn: int,
) -> tuple[dict[str, float], list[dict[str, float]], dict[str, list[Any]], dict[str, float]]:
    """One round of contenders taking turns chunk by chunk, so load drifts hit all alike.

    Each side is called on its own ``inputs`` (same length for all), ``chunk`` at a time; the
    order of the sides cycles through their permutations, ``turn`` picking where this round
    starts so rounds do not repeat it. Returns the seconds per side, the seconds of each chunk
    per side (for paired ratios), each side's output per chunk, and the process's CPU seconds
    per side (less moved than wall time by other processes' load).
    """
    orders = list(itertools.permutations(sides))
    n = len(next(iter(inputs.values())))
    spent = dict.fromkeys(sides, 0.0)
    cpu = dict.fromkeys(sides, 0.0)
    per_chunk: list[dict[str, float]] = []
    outputs: dict[str, list[Any]] = {name: [] for name in sides}
    for i, part in enumerate(chunks(n, chunk)):
        took = {}
        for name in orders[(turn + i) % len(orders)]:
            batch = inputs[name][part]
            began, began_cpu = time.perf_counter(), time.process_time()
            outputs[name].append(sides[name](batch))
            took[name] = time.perf_counter() - began
            cpu[name] += time.process_time() - began_cpu
            spent[name] += took[name]
        per_chunk.append(took)
    return spent, per_chunk, outputs, cpu


def flattened(parts: list[list[Any]]) -> list[Any]:
    """A side's per-chunk outputs (lists) as one list."""
    return [item for part in parts for item in part]


def writes(name: str) -> str:
    """The ``--help`` epilog naming where a benchmark writes its result."""
    return (
        f"Writes benchmarks/results/{name}.json (or --out). With --quick: a temporary folder "
        "(or --out), never benchmarks/results/."
    )


def quick_folder(name: str) -> Path:
    """A new temporary folder for what a ``--quick`` run of ``name`` writes."""
    return Path(tempfile.mkdtemp(prefix=f"ctxemb-bench-{name}-quick-"))


def share_exports(cache: Path) -> None:
    """Let a quick run's own cache folder ``cache`` reuse this process's ONNX exports.

    A benchmark that gives its children a cache folder of their own (so that what it removes is
    only its own) would otherwise rebuild the export of the model there, which takes longer than
    the whole ``--quick`` run; the exports (and their tokenizers) are read through links to the
    cache of the calling environment (``$CTXEMB_CACHE_DIR``, a test session's in the tests),
    everything else stays private.
    """
    from ctxemb_core._files import cache_dir

    cache.mkdir(parents=True, exist_ok=True)
    for part in ("onnx", "tokenizers"):
        shared = cache_dir() / part
        shared.mkdir(parents=True, exist_ok=True)
        if not (cache / part).exists():
            (cache / part).symlink_to(shared, target_is_directory=True)


def write_result(
    name: str, payload: dict[str, Any], out: Path | None = None, *, quick: bool = False
) -> Path:
    """Write ``payload`` (with a timestamp and the command) as JSON; returns the path.

    A ``quick`` run (``--quick``) is a check, not a measurement: without ``out`` its result goes
    to a new temporary folder, so that it never replaces a published figure, and it says
    ``"quick": true``.
    """
    if out is not None:
        path = out
    elif quick:
        path = quick_folder(name) / f"{name}.json"
    else:
        path = RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    full = {
        "benchmark": name,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
        **({"quick": True} if quick else {}),
        **payload,
    }
    path.write_text(json.dumps(full, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
