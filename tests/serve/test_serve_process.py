"""The ``ctxemb serve`` command as a process (issue 27): an export served with torch refused,
SIGTERM finishing the request in flight, Ctrl-C exiting 130, a taken port refused in one line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from embedding_server import REPO, get, post, serve_process

from ctxemb_core.export import export_model

# Refuses torch, transformers and onnx at import: what a base install plus uvicorn has.
TORCH_FREE = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"torch", "transformers", "onnx"}:
            raise ModuleNotFoundError(f"{name} is refused: a torch-free install", name=name)
        return None
sys.meta_path.insert(0, Refuse())
"""


@pytest.fixture(scope="module")
def export(tmp_path_factory, minilm_contract):
    return export_model(minilm_contract, tmp_path_factory.mktemp("serve") / "minilm-export")


def _cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) a process has used so far, from ``/proc``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.heavy
def test_an_export_is_served_without_torch_and_sigterm_drains_the_request_in_flight(
    export, minilm, tmp_path
):
    # 24 long documents, seconds of the server's CPU. Eight distinct ones, each sent three
    # times: this process embeds each once for the reference, and every row of the answer is
    # held to its own text's vector.
    distinct = [f"document {i} " + "about the river bank and its herons " * 30 for i in range(8)]
    texts = distinct * 3
    expected = np.tile(minilm.embed_documents(distinct), (3, 1))
    with serve_process([str(export)], cwd=tmp_path, prelude=TORCH_FREE) as (proc, url):
        health = json.loads(get(url + "/health")[2])
        assert health["fingerprint"] == minilm.contract.fingerprint
        answer: dict = {}

        def request() -> None:
            answer["response"] = post(
                url + "/v1/embeddings", {"model": minilm.contract.model, "input": texts}
            )

        idle = _cpu_seconds(proc.pid)
        thread = threading.Thread(target=request)
        thread.start()
        # SIGTERM once the server is at work on the request (a quarter of a second of its CPU
        # since it was idle) and before the answer is back: the request is in flight, surely,
        # whatever the machine's load (a fixed sleep would only make it likely).
        while thread.is_alive() and _cpu_seconds(proc.pid) < idle + 0.25:
            time.sleep(0.01)
        assert thread.is_alive(), "the answer came back before SIGTERM was sent"
        proc.send_signal(signal.SIGTERM)
        thread.join(timeout=120)
        code = proc.wait(timeout=60)
    status, _headers, body = answer["response"]
    assert status == 200
    got = np.stack([np.asarray(d["embedding"], dtype=np.float32) for d in body["data"]])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert code == 0, proc.log
    assert "stopped after the requests in flight" in proc.log
    assert "backend onnx" in proc.log


@pytest.mark.heavy
def test_ctrl_c_exits_130(minilm_contract, tmp_path):
    with serve_process([minilm_contract.model], cwd=tmp_path) as (proc, _url):
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    assert code == 130, proc.log
    assert "stopped (Ctrl-C)" in proc.log


def test_a_taken_port_is_refused_in_one_line(minilm_contract, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "ctxemb_core.cli",
                "serve",
                minilm_contract.model,
                "--port",
                str(port),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2, result.stderr
    assert f"port {port} on 127.0.0.1 is in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_contract_options_and_a_contract_file_choose_what_is_served(minilm_contract, tmp_path):
    prefixed = minilm_contract.with_(query_prefix="query: ")
    path = tmp_path / "contract.json"
    path.write_text(prefixed.to_json(), encoding="utf-8")
    with serve_process([str(path)], cwd=tmp_path) as (proc, url):
        served = json.loads(get(url + "/v1/contract")[2])
    assert served["fingerprint"] == prefixed.fingerprint
    assert served["symmetric"] is False
    assert "the role is required" in proc.log
