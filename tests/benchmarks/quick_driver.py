"""Runs benchmark scripts' ``--quick``, one after another, in this one process.

Usage: ``python tests/benchmarks/quick_driver.py RECORDS SCRIPT...``. Each script runs as
``python SCRIPT --quick`` would run it (``runpy.run_path(SCRIPT, run_name="__main__")`` with
``sys.argv`` set and the script's folder first on ``sys.path``), and leaves one JSON line in
``RECORDS``, written as soon as it ends: its exit status, stdout, stderr, the traceback of an
exception, the files of ``benchmarks/results/`` it changed, and its wall and CPU seconds (this
process and its children). A script that fails is recorded and the next one runs; a script that
kills the process leaves no line, and neither do those after it.

Why one process: most of a quick run was importing sentence-transformers, transformers, torch,
Chroma (about 13 CPU-s each time); here they are imported once. What one script could leave to
the next is put back after each: the environment, the working directory, ``sys.argv`` and
``sys.path``, the warnings filters, the root logger, torch's thread count, and the process-wide
caches of loaded networks (ctxemb's and Chroma's), so that each script loads its networks as in
a process of its own. ``tests/benchmarks/test_benchmarks_run.py`` says which scripts run here.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import json
import logging
import os
import resource
import runpy
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
#: The longest a script may run (the per-script timeout of a script in its own process).
SCRIPT_TIMEOUT = 900
#: Process-wide caches of loaded networks: (module, attribute), emptied after each script. A
#: name that is gone (renamed) is skipped: the scripts would then share a loaded network.
NETWORK_CACHES = (
    ("ctxemb_core.networks", "_ENCODERS"),
    ("ctxemb_core.rerank.cross", "_NETWORKS"),
)


def digests() -> dict[str, str]:
    """Each file of ``benchmarks/results/`` with its sha256 (what a quick run must not change)."""
    return {
        p.relative_to(RESULTS).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(RESULTS.rglob("*"))
        if p.is_file()
    }


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed_out(signum: int, frame: Any) -> None:
    raise TimeoutError(f"still running after {SCRIPT_TIMEOUT} s")


def _forget_networks() -> None:
    for module, name in NETWORK_CACHES:
        cache = getattr(sys.modules.get(module), name, None)
        if cache is not None:
            cache.clear()
    detect = sys.modules.get("ctxemb_core.detect")
    if detect is not None and hasattr(detect, "_network"):
        detect._network.cache_clear()
    chroma = sys.modules.get("chromadb.api.client")
    if chroma is not None:
        chroma.SharedSystemClient.clear_system_cache()


def run(script: Path) -> dict[str, Any]:
    """``python script --quick`` in this process; what it did, as a record."""
    saved_argv, saved_path, saved_cwd = sys.argv[:], sys.path[:], os.getcwd()
    saved_env = dict(os.environ)
    root = logging.getLogger()
    saved_level, saved_handlers = root.level, root.handlers[:]
    # torch's threads, put back after the script. Not covered: the script that imports torch
    # first (no count to put back yet); none changes it for good in a quick run (each sets
    # threads only with --threads, or puts them back).
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    before = digests()
    out, err = io.StringIO(), io.StringIO()
    status, failure = 0, None
    started, cpu = time.perf_counter(), _cpu_seconds()
    sys.argv = [str(script), "--quick"]
    sys.path.insert(0, str(script.parent))  # as `python script` puts it: `from _common import`
    signal.alarm(SCRIPT_TIMEOUT)
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:  # what the interpreter would make of it
        if exc.code is None or isinstance(exc.code, int):
            status = exc.code or 0
        else:
            status = 1
            err.write(f"{exc.code}\n")
    except Exception:
        status, failure = 1, traceback.format_exc()
    finally:
        signal.alarm(0)
        sys.argv[:], sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        root.setLevel(saved_level)
        root.handlers[:] = saved_handlers
        torch = sys.modules.get("torch")
        if torch is not None and threads is not None:
            torch.set_num_threads(threads)
        _forget_networks()
        gc.collect()
    after = digests()
    return {
        "script": script.stem,
        "status": status,
        "stdout": out.getvalue(),
        "stderr": err.getvalue(),
        "traceback": failure,
        "results_changed": sorted(
            k for k in before.keys() | after.keys() if before.get(k) != after.get(k)
        ),
        "seconds": time.perf_counter() - started,
        "cpu_seconds": _cpu_seconds() - cpu,
    }


def main(argv: list[str]) -> int:
    records, *scripts = argv
    signal.signal(signal.SIGALRM, _timed_out)
    with open(records, "a", encoding="utf-8") as fh:
        for script in scripts:
            record = run(Path(script).resolve())
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            print(f"{record['script']}: exit {record['status']}, {record['cpu_seconds']:.1f} CPU-s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
