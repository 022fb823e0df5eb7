"""A real Chroma server on 127.0.0.1 for tests: started, waited for, stopped."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def chroma_server(path: Path, timeout: float = 60.0) -> Iterator[int]:
    """Run ``chroma run`` on a free loopback port until the block ends; yields the port."""
    import chromadb

    chroma = Path(sys.executable).with_name("chroma")
    port = free_port()
    log = open(path.parent / f"chroma-{port}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(chroma), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"chroma server exited with {proc.returncode}; see {log.name}")
            try:
                chromadb.HttpClient(host="127.0.0.1", port=port).heartbeat()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"chroma server not up after {timeout}s") from None
                time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
