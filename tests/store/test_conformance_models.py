"""The conformance suite's tiny models are built once per user into one folder of the temporary
directory, which every later process reuses: a process killed mid-run leaves nothing new behind
(a folder per process, removed at exit, was left by every killed one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_MODELS = "from ctxemb_core.testing.conformance import _models; print(_models()[0])"


def _models_in(tmp: Path) -> Path:
    env = {**os.environ, "TMPDIR": str(tmp)}
    done = subprocess.run(
        [sys.executable, "-c", _MODELS], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return Path(done.stdout.strip())


def test_every_process_reuses_one_folder_of_models(tmp_path: Path) -> None:
    first, again = _models_in(tmp_path), _models_in(tmp_path)
    assert first == again and first.is_relative_to(tmp_path) and first.is_dir()
    (folder,) = tmp_path.iterdir()  # nothing half-built, nothing per process
    assert folder.name.startswith("ctxemb-conformance-") and folder.stat().st_mode & 0o077 == 0


def test_a_folder_others_could_write_under_that_name_is_not_used(tmp_path: Path) -> None:
    name = _models_in(tmp_path).parents[1].name
    for child in tmp_path.iterdir():
        subprocess.run(["rm", "-rf", str(child)], check=True)
    planted = tmp_path / name
    (planted / "c" / "model").mkdir(parents=True)
    planted.chmod(0o777)
    used = _models_in(tmp_path)
    # A folder of its own, removed when the process ended; nothing went into the planted one.
    assert not used.is_relative_to(planted) and not used.exists()
    assert not any((planted / "c" / "model").iterdir())
