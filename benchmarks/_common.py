"""Helpers shared by the benchmarks: data location, machine facts, result files."""

from __future__ import annotations

import gzip
import json
import os
import platform
import shlex
import sys
import warnings
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


def machine_info() -> dict[str, Any]:
    """Facts about the machine and library versions that figures depend on."""
    import numpy as np
    import torch
    import transformers

    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "transformers": transformers.__version__,
    }
    try:
        import sentence_transformers

        info["sentence_transformers"] = sentence_transformers.__version__
    except ImportError:
        pass
    if hasattr(os, "getloadavg"):
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


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


def write_result(name: str, payload: dict[str, Any], out: Path | None = None) -> Path:
    """Write ``payload`` (with a timestamp and the command) as JSON; returns the path."""
    path = out if out is not None else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    full = {
        "benchmark": name,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(),
        **payload,
    }
    path.write_text(json.dumps(full, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
