"""Every benchmark result names the CPU and the library versions its figures came from.

A speed ratio means little without the CPU it was measured on (the same benchmark gave 2.00x on
one 2-core machine and 1.22x on another), so each ``benchmarks/results/*.json`` must carry the
structured CPU block ``benchmarks/_common.machine_info`` writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = sorted((REPO / "benchmarks" / "results").glob("*.json"))
CPU_KEYS = {"model_name", "family", "model", "stepping", "cores", "cores_available", "flags"}
FLAGS = {
    "avx2",
    "avx512f",
    "avx512_vnni",
    "avx_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
}


def test_there_are_results() -> None:
    assert len(RESULTS) >= 8, [p.name for p in RESULTS]


def _check_machine(machine: Any, where: str) -> None:
    assert isinstance(machine, dict), f"{where}: no 'machine' block"
    cpu = machine.get("cpu")
    assert isinstance(cpu, dict), f"{where}: no 'machine.cpu' block (re-run the benchmark)"
    assert set(cpu) >= CPU_KEYS, f"{where}: machine.cpu lacks {sorted(CPU_KEYS - set(cpu))}"
    assert isinstance(cpu["model_name"], str) and cpu["model_name"], where
    for key in ("family", "model", "stepping"):
        assert isinstance(cpu[key], int) and cpu[key] >= 0, f"{where}: cpu.{key}={cpu[key]!r}"
    assert isinstance(cpu["cores"], int) and cpu["cores"] >= 1, where
    assert isinstance(cpu["cores_available"], int), where
    assert 1 <= cpu["cores_available"] <= cpu["cores"], where
    flags = cpu["flags"]
    assert isinstance(flags, dict) and set(flags) == FLAGS, f"{where}: flags {flags!r}"
    assert all(isinstance(v, bool) for v in flags.values()), f"{where}: flags {flags!r}"
    assert isinstance(machine.get("onnxruntime"), str), f"{where}: no onnxruntime version"
    assert "torch" in machine, f"{where}: no torch version (null when torch is absent)"
    assert machine["torch"] is None or isinstance(machine["torch"], str), where


@pytest.mark.parametrize("path", RESULTS, ids=[p.stem for p in RESULTS])
def test_result_names_its_cpu_and_versions(path: Path) -> None:
    result = json.loads(path.read_text(encoding="utf-8"))
    # Every result carries the block; one without it is re-run with its own command.
    _check_machine(result.get("machine"), f"{path.name} (re-run: {result.get('command')})")


def test_machine_info_reads_this_cpu_without_importing_torch() -> None:
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); import _common; "
        "info = _common.machine_info(); info['torch_loaded'] = 'torch' in sys.modules; "
        "print(json.dumps(info))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    info = json.loads(out.stdout)
    assert info["torch_loaded"] is False
    _check_machine(info, "machine_info()")
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        pytest.skip("no /proc/cpuinfo to compare with")
    first = cpuinfo.read_text().split("\n\n")[0]
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in first.splitlines())
    )
    present = set(fields["flags"].split())
    assert info["cpu"]["flags"] == {flag: flag in present for flag in FLAGS}
    assert info["cpu"]["family"] == int(fields["cpu family"])
    assert info["cpu"]["model"] == int(fields["model"])
    label = info["cpu_label"]
    assert f"family {fields['cpu family']} model {fields['model']}" in label
    assert ("AMX" in label) == ("amx_tile" in present)
