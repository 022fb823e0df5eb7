"""The server's counters, in the Prometheus text format (``GET /metrics``)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence

__all__ = ["Metrics", "ModelCounters"]

_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
_WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _Histogram:
    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.total += 1
        self.sum += value

    def lines(self, name: str, model: str | None = None) -> list[str]:
        """The series of ``name``, labelled with ``model`` when one is given."""
        first = "" if model is None else f'model="{_label(model)}",'
        only = "" if model is None else f'{{model="{_label(model)}"}}'
        out = [
            f'{name}_bucket{{{first}le="{_number(b)}"}} {c}'
            for b, c in zip(self.buckets, self.counts, strict=True)
        ]
        out.append(f'{name}_bucket{{{first}le="+Inf"}} {self.total}')
        out.append(f"{name}_sum{only} {_number(self.sum)}")
        out.append(f"{name}_count{only} {self.total}")
        return out


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class ModelCounters:
    """One served model's counters: texts, tokens, truncations, batch sizes and queue waits."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.texts: Counter[str] = Counter()
        self.tokens: Counter[str] = Counter()
        self.truncated = 0
        self.batch_texts = _Histogram(_BATCH_BUCKETS)
        self.queue_wait = _Histogram(_WAIT_BUCKETS)

    def embedded(self, role: str, texts: int, tokens: int) -> None:
        with self._lock:
            self.texts[role] += texts
            self.tokens[role] += tokens

    def batch(self, texts: int, waits: Sequence[float], truncated: int) -> None:
        with self._lock:
            self.batch_texts.observe(texts)
            for wait in waits:
                self.queue_wait.observe(wait)
            self.truncated += truncated


class Metrics:
    """Requests and errors of one server process, and each served model's counters.

    Requests and errors are the process's (a request naming no served model has none); the
    rest is per model (:meth:`of`). With one model the series carry no ``model`` label, as
    before several could be served; with several, each model's carry ``model="ID"``.
    """

    def __init__(self, instance: str, models: Mapping[str, str]) -> None:
        """``models``: each served model id and its contract's fingerprint."""
        self._lock = threading.Lock()
        self.info = [
            {"fingerprint": fingerprint, "instance": instance, "model": model}
            for model, fingerprint in models.items()
        ]
        self.models = {model: ModelCounters(self._lock) for model in models}
        self.requests: Counter[tuple[str, int]] = Counter()
        self.errors: Counter[str] = Counter()

    def of(self, model: str) -> ModelCounters:
        """The counters of the served model ``model``."""
        return self.models[model]

    def request(self, route: str, status: int) -> None:
        with self._lock:
            self.requests[(route, status)] += 1

    def error(self, kind: str) -> None:
        with self._lock:
            self.errors[kind] += 1

    def render(self) -> str:
        """The Prometheus text exposition (version 0.0.4)."""
        labelled = len(self.models) > 1

        def series(model: str, **labels: str) -> str:
            pairs = ({"model": model} if labelled else {}) | labels
            inner = ",".join(f'{k}="{_label(v)}"' for k, v in pairs.items())
            return f"{{{inner}}}" if inner else ""

        with self._lock:
            lines = [
                "# HELP ctxemb_info The contract this process serves (value always 1).",
                "# TYPE ctxemb_info gauge",
            ]
            for info in self.info:
                labels = ",".join(f'{k}="{_label(v)}"' for k, v in info.items())
                lines.append(f"ctxemb_info{{{labels}}} 1")
            lines += [
                "# HELP ctxemb_requests_total HTTP requests answered, by route and status.",
                "# TYPE ctxemb_requests_total counter",
            ]
            lines += [
                f'ctxemb_requests_total{{route="{_label(r)}",status="{s}"}} {n}'
                for (r, s), n in sorted(self.requests.items())
            ]
            lines += [
                "# HELP ctxemb_texts_total Texts embedded, by role.",
                "# TYPE ctxemb_texts_total counter",
            ]
            lines += [
                f"ctxemb_texts_total{series(m, role=r)} {n}"
                for m, c in self.models.items()
                for r, n in sorted(c.texts.items())
            ]
            lines += [
                "# HELP ctxemb_tokens_total Tokens read by the encoder (prefix and special tokens "
                "included, after truncation), by role.",
                "# TYPE ctxemb_tokens_total counter",
            ]
            lines += [
                f"ctxemb_tokens_total{series(m, role=r)} {n}"
                for m, c in self.models.items()
                for r, n in sorted(c.tokens.items())
            ]
            lines += [
                "# HELP ctxemb_truncated_texts_total Texts cut to the contract's max_tokens.",
                "# TYPE ctxemb_truncated_texts_total counter",
            ]
            lines += [
                f"ctxemb_truncated_texts_total{series(m)} {c.truncated}"
                for m, c in self.models.items()
            ]
            lines += [
                "# HELP ctxemb_errors_total Requests refused or failed, by kind.",
                "# TYPE ctxemb_errors_total counter",
            ]
            lines += [
                f'ctxemb_errors_total{{kind="{_label(k)}"}} {n}'
                for k, n in sorted(self.errors.items())
            ]
            lines += [
                "# HELP ctxemb_batch_texts Texts in each gathered batch.",
                "# TYPE ctxemb_batch_texts histogram",
            ]
            for m, c in self.models.items():
                lines += c.batch_texts.lines("ctxemb_batch_texts", m if labelled else None)
            lines += [
                "# HELP ctxemb_queue_wait_seconds Time a request waited before its batch ran.",
                "# TYPE ctxemb_queue_wait_seconds histogram",
            ]
            for m, c in self.models.items():
                lines += c.queue_wait.lines("ctxemb_queue_wait_seconds", m if labelled else None)
        return "\n".join(lines) + "\n"
