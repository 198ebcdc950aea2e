"""A load level's figures, by the definitions of SGLang's own load generator.

``sglang.bench_serving`` (sglang 0.5.17, ``sglang/benchmark/serving.py``) defines what
TTFT, ITL, TPOT, end-to-end latency and throughput mean for an OpenAI endpoint, and
sparkctl reports by those definitions (a contract test runs the release's
``calculate_metrics`` on the same requests and compares):

- a request's **TTFT** is the time from sending it to the first streamed chunk that
  carries text (``async_request_openai_completions``); its **ITL** values are the gaps
  between that chunk and each later one with text; its **latency** (end to end) runs to
  the last chunk; its output length is the server's ``usage.completion_tokens`` (the
  requested ``max_tokens`` where the server sends none);
- **TPOT** of a request with more than one output token is ``(latency - ttft) /
  (output_len - 1)``; the ITLs of every request are pooled into one list;
- medians by ``numpy.median``, percentiles by ``numpy.percentile`` (linear
  interpolation); an empty list counts as ``[0]``, as there;
- **throughput** divides by the level's wall time: output tokens / s, requests / s
  (completed ones), input tokens / s. A failed request counts 0 output tokens and
  no times, and is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class RequestRecord:
    """One request of a level, as ``RequestFuncOutput`` holds it (seconds)."""

    success: bool
    start: float  # perf_counter() at the send
    ttft: float = 0.0
    itl: tuple[float, ...] = ()
    latency: float = 0.0
    output_len: int = 0
    input_len: int = 0
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "ttft_s": round(self.ttft, 6),
            "latency_s": round(self.latency, 6),
            "output_len": self.output_len,
            "input_len": self.input_len,
            "itl_s": [round(x, 6) for x in self.itl],
            "error": self.error,
        }


@dataclass(frozen=True)
class Spread:
    """A quantity over a level's requests, in milliseconds."""

    mean: float
    p50: float
    p99: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Spread:
        values = list(seconds) or [0.0]  # bench_serving: ``np.mean(x or 0)``
        return cls(
            mean=float(np.mean(values)) * 1000,
            p50=float(np.median(values)) * 1000,
            p99=float(np.percentile(values, 99)) * 1000,
        )

    def to_dict(self) -> dict[str, float]:
        return {"mean": round(self.mean, 3), "p50": round(self.p50, 3), "p99": round(self.p99, 3)}


@dataclass(frozen=True)
class LevelFigures:
    """What one load level measured."""

    requests: int
    completed: int
    errors: int
    duration_s: float
    output_tokens: int
    input_tokens: int
    output_tokens_per_s: float
    requests_per_s: float
    input_tokens_per_s: float
    ttft_ms: Spread
    itl_ms: Spread
    tpot_ms: Spread
    e2e_ms: Spread
    error_samples: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "completed": self.completed,
            "errors": self.errors,
            "duration_s": round(self.duration_s, 3),
            "output_tokens": self.output_tokens,
            "input_tokens": self.input_tokens,
            "output_tokens_per_s": round(self.output_tokens_per_s, 3),
            "requests_per_s": round(self.requests_per_s, 4),
            "input_tokens_per_s": round(self.input_tokens_per_s, 3),
            "ttft_ms": self.ttft_ms.to_dict(),
            "itl_ms": self.itl_ms.to_dict(),
            "tpot_ms": self.tpot_ms.to_dict(),
            "e2e_ms": self.e2e_ms.to_dict(),
            "error_samples": list(self.error_samples),
        }


def summarize(records: Sequence[RequestRecord], duration_s: float) -> LevelFigures:
    """A level's figures from its requests and its wall time (``calculate_metrics``)."""
    if duration_s <= 0:
        raise ValueError(f"a level's duration must be positive, got {duration_s}")
    done = [r for r in records if r.success]
    output = sum(r.output_len for r in done)
    inputs = sum(r.input_len for r in done)
    tpots = [(r.latency - r.ttft) / (r.output_len - 1) for r in done if r.output_len > 1]
    itls = [gap for r in done for gap in r.itl]
    errors = [r.error for r in records if not r.success]
    return LevelFigures(
        requests=len(records),
        completed=len(done),
        errors=len(errors),
        duration_s=duration_s,
        output_tokens=output,
        input_tokens=inputs,
        output_tokens_per_s=output / duration_s,
        requests_per_s=len(done) / duration_s,
        input_tokens_per_s=inputs / duration_s,
        ttft_ms=Spread.of([r.ttft for r in done]),
        itl_ms=Spread.of(itls),
        tpot_ms=Spread.of(tpots),
        # bench_serving takes these over the completed requests without the ``or 0``
        e2e_ms=Spread.of([r.latency for r in done]),
        error_samples=tuple(dict.fromkeys(e[:300] for e in errors))[:3],
    )
