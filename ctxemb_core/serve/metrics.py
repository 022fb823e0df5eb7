"""The server's counters, in the Prometheus text format (``GET /metrics``)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence

__all__ = ["Metrics"]

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

    def lines(self, name: str) -> list[str]:
        out = [
            f'{name}_bucket{{le="{_number(b)}"}} {c}'
            for b, c in zip(self.buckets, self.counts, strict=True)
        ]
        out.append(f'{name}_bucket{{le="+Inf"}} {self.total}')
        out.append(f"{name}_sum {_number(self.sum)}")
        out.append(f"{name}_count {self.total}")
        return out


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    """Requests, texts, tokens, batch sizes, queue waits and errors of one server process."""

    def __init__(self, fingerprint: str, instance: str, model: str) -> None:
        self._lock = threading.Lock()
        self.info = {"fingerprint": fingerprint, "instance": instance, "model": model}
        self.requests: Counter[tuple[str, int]] = Counter()
        self.texts: Counter[str] = Counter()
        self.tokens: Counter[str] = Counter()
        self.truncated = 0
        self.errors: Counter[str] = Counter()
        self.batch_texts = _Histogram(_BATCH_BUCKETS)
        self.queue_wait = _Histogram(_WAIT_BUCKETS)
        self.canary_rounds = 0

    def request(self, route: str, status: int) -> None:
        with self._lock:
            self.requests[(route, status)] += 1

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

    def error(self, kind: str) -> None:
        with self._lock:
            self.errors[kind] += 1

    def render(self) -> str:
        """The Prometheus text exposition (version 0.0.4)."""
        with self._lock:
            info = ",".join(f'{k}="{_label(v)}"' for k, v in self.info.items())
            lines = [
                "# HELP ctxemb_info The contract this process serves (value always 1).",
                "# TYPE ctxemb_info gauge",
                f"ctxemb_info{{{info}}} 1",
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
                f'ctxemb_texts_total{{role="{r}"}} {n}' for r, n in sorted(self.texts.items())
            ]
            lines += [
                "# HELP ctxemb_tokens_total Tokens read by the encoder (prefix and special tokens "
                "included, after truncation), by role.",
                "# TYPE ctxemb_tokens_total counter",
            ]
            lines += [
                f'ctxemb_tokens_total{{role="{r}"}} {n}' for r, n in sorted(self.tokens.items())
            ]
            lines += [
                "# HELP ctxemb_truncated_texts_total Texts cut to the contract's max_tokens.",
                "# TYPE ctxemb_truncated_texts_total counter",
                f"ctxemb_truncated_texts_total {self.truncated}",
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
                *self.batch_texts.lines("ctxemb_batch_texts"),
                "# HELP ctxemb_queue_wait_seconds Time a request waited before its batch ran.",
                "# TYPE ctxemb_queue_wait_seconds histogram",
                *self.queue_wait.lines("ctxemb_queue_wait_seconds"),
            ]
        return "\n".join(lines) + "\n"
