"""Two tests that spend CPU, one in its own process and one in a child: run by
tests/suite/test_cpu_profile.py with the profile on (not collected by the suite itself: the file
name does not start with ``test_``)."""

from __future__ import annotations

import subprocess
import sys
import time

#: A loop that runs for this many CPU seconds.
SPIN = "import time\nend = time.process_time() + {0}\nwhile time.process_time() < end: pass"


def test_spins_in_process() -> None:
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass


def test_spins_in_a_child() -> None:
    subprocess.run([sys.executable, "-c", SPIN.format(0.3)], check=True)
