"""What verifying replicas behind one URL costs: canary requests per replica per minute.

Three ``ctxemb serve`` replicas of the bundled MiniLM's contract (uvicorn in threads of this
process, on 127.0.0.1) stand behind one URL: a real nginx (Debian's nginx-light, a default
``upstream``: round robin per request) when it is installed, else a per-connection balancer
(a small TCP proxy, as a Kubernetes Service balances). Eight client threads share one remote
``Embedder`` and embed single short queries for ``--seconds``. Reported, from the replicas' own
view (the ``ctxemb-instance`` of every answer):

* ``api="ctxemb"``: the canary requests each replica answered per minute, beside the requests
  it answered — each replica is verified once, then again every ``check_every`` requests and
  ``check_seconds`` seconds of its answers;
* ``api="openai"`` (a third-party server: no instance id), where every new connection is
  verified before it is used: the canary requests per connection under keep-alive, and their
  share of all requests.

Usage:
    .venv/bin/python benchmarks/replica_canary.py [--seconds 20]
    .venv/bin/python benchmarks/replica_canary.py --quick
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import add_quick, machine_info, offline, quiet_truncation, write_result, writes

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

THREADS = 8


def _run(remote: Any, seconds: float) -> int:
    """Embed single queries from THREADS threads for ``seconds``; the requests made."""
    stop = time.monotonic() + seconds
    counts = [0] * THREADS

    def work(worker: int) -> None:
        i = 0
        while time.monotonic() < stop:
            remote.embed_query(f"client {worker} asks question {i} about herons")
            i += 1
        counts[worker] = i

    threads = [threading.Thread(target=work, args=(w,)) for w in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=writes("replica_canary")
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="per API (default 20)")
    parser.add_argument("--out", type=Path, default=None, help="where to write the result")
    add_quick(parser, "0.5 s per API")
    args = parser.parse_args(argv)
    seconds = 0.5 if args.quick else args.seconds
    offline()
    quiet_truncation()

    from embedding_server import ConnectionBalancer, nginx, nginx_binary, serving

    from ctxemb_core import Embedder, IndexStamp, contract_for

    contract = contract_for("sentence-transformers/all-MiniLM-L6-v2")
    local = Embedder(contract)
    result: dict[str, Any] = {"threads": THREADS, "seconds": seconds}
    with contextlib.ExitStack() as stack:
        replicas = [stack.enter_context(serving(local)) for _ in range(3)]
        urls = [r.url for r in replicas]
        if nginx_binary() is not None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            url = stack.enter_context(nginx(urls, work / "nginx"))
            result["balancer"] = "nginx (round robin per request)"
        else:
            balancer = ConnectionBalancer(urls)
            stack.callback(balancer.close)
            url = balancer.url
            result["balancer"] = "per-connection TCP proxy"
        for api in ("ctxemb", "openai"):
            # --quick: the stamp's short probes only (the long one is most of a round's cost).
            quick = {"reference": IndexStamp.from_embedder(local)} if args.quick else {}
            remote = Embedder(contract, url=url, api=api, **quick)
            requests = _run(remote, seconds)
            encoder = remote.remote
            canary = sum(encoder.canary_answers.values())
            per_minute = 60.0 / seconds
            entry: dict[str, Any] = {
                "requests": requests,
                "requests_per_second": round(requests / seconds, 1),
                "canary_requests": canary,
                "canary_share": round(canary / max(1, canary + requests), 4),
                "checks": encoder.checks,
            }
            if api == "ctxemb":
                entry["canary_requests_per_replica_per_minute"] = {
                    key[:8]: round(encoder.canary_answers.get(key, 0) * per_minute, 1)
                    for key in (r.instance for r in replicas)
                }
                entry["verifications_per_replica"] = {
                    key[:8]: encoder.verifications.get(key, 0)
                    for key in (r.instance for r in replicas)
                }
            else:
                entry["connections_verified"] = len(encoder.verifications)
                entry["canary_requests_per_connection"] = round(
                    canary / max(1, len(encoder.verifications)), 2
                )
            result[api] = entry
            print(f"{api}: {entry}")
            remote.remote.close()
    result["machine"] = machine_info()
    path = write_result("replica_canary", result, args.out, quick=args.quick)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
