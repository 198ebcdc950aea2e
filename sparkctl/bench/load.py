"""The bench's load: a fixed, seeded workload sent through the OpenAI API, timed as
``sglang.bench_serving`` times it.

Why sparkctl drives the load itself. The three well-kept generators were weighed
against the controller's dependencies:
``sglang.bench_serving`` comes only inside the sglang package, whose import pulls
triton and torch and, for its datasets, HF ``datasets`` (pyarrow, pandas); guidellm
0.8 requires torch, transformers and datasets; NVIDIA's aiperf 0.13 about fifty
packages (dash, kubernetes, pandas, scipy, matplotlib ...). None fits a controller
that installs sparkctl from a wheel. So the requests are sent here, with httpx, the
way bench_serving's ``sglang-oai`` backend sends them (``async_request_openai_completions``):

- ``POST /v1/completions`` streamed, ``temperature`` 0, ``ignore_eos`` true (every
  request decodes exactly ``max_tokens``). bench_serving also sends ``best_of`` 1; SGLang's
  gateway (smg) refuses any ``best_of`` on a streamed request (HTTP 400
  ``best_of_not_supported_with_stream``, its ``validate_completion_cross_parameters``),
  and 1 is the API's default, so it is left out;
- the time to first token is taken at the first chunk whose text is not empty, each
  later chunk with text adds an inter-token gap, the latency runs to the last chunk;
- the output length is the server's ``usage.completion_tokens`` (``stream_options:
  include_usage``), else ``max_tokens``; the input length its ``usage.prompt_tokens``.

The figures are then computed by bench_serving's definitions (:mod:`sparkctl.bench.stats`,
held to the release's ``calculate_metrics`` by a contract test).

The workload is the same on every run: prompt ``i`` is ``input_words`` words drawn from
a fixed list with ``random.Random(f"{seed}/{i}")``. Word counts are not token counts (no
tokenizer on the controller): the report gives the server's own count of input tokens.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from sparkctl.bench.stats import RequestRecord
from sparkctl.endpoint import Endpoint

# Common English words: prompts of ordinary text, for every tokenizer.
_WORDS = """
the of and to in is was for on that with as by at from his her it an were are which
this be or has had have not but they their one all been who when there more other
time new some would into first two may about over after also year years only many
city most such made world later where state under between part during people both
these while since work through known same each water system three well used then
number high small large long early place public form general house line power area
school local life river group family name began second found light government
history music road court field order market model cluster memory network data
"""
WORDS = tuple(_WORDS.split())


@dataclass(frozen=True)
class Workload:
    """What every request of a level is: its prompt and its output length."""

    input_words: int
    output_len: int
    seed: int = 0

    def prompt(self, index: int) -> str:
        rng = random.Random(f"{self.seed}/{index}")  # noqa: S311 - a workload, not a secret
        return " ".join(rng.choice(WORDS) for _ in range(self.input_words))

    def to_dict(self) -> dict[str, Any]:
        return {"input_words": self.input_words, "output_len": self.output_len, "seed": self.seed}


def send(target: Endpoint, prompt: str, max_tokens: int) -> RequestRecord:
    """One streamed completion, timed as bench_serving times it."""
    body = {
        "model": target.model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
        "ignore_eos": True,
    }
    start = time.perf_counter()
    ttft, last, latency = 0.0, start, 0.0
    itl: list[float] = []
    output_len, input_len = max_tokens, 0
    try:
        with target.http.stream(
            "POST", f"{target.url}/v1/completions", json=body, headers=dict(target.headers)
        ) as resp:
            if resp.status_code != 200:
                resp.read()
                return RequestRecord(
                    False, start, error=f"HTTP {resp.status_code}: {resp.text[:200]}"
                )
            for raw in resp.iter_lines():
                line = raw.strip()
                if not line:
                    continue
                chunk = line.removeprefix("data: ")
                latency = time.perf_counter() - start
                if chunk == "[DONE]":
                    continue
                data = json.loads(chunk)
                usage = data.get("usage") or {}
                output_len = int(usage.get("completion_tokens", output_len))
                input_len = int(usage.get("prompt_tokens", input_len))
                choices = data.get("choices") or []
                if choices and choices[0].get("text"):
                    now = time.perf_counter()
                    if ttft == 0.0:
                        ttft = now - start
                    else:
                        itl.append(now - last)
                    last = now
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        return RequestRecord(False, start, error=f"{type(exc).__name__}: {exc}"[:300])
    if ttft == 0.0:
        return RequestRecord(False, start, error="the stream carried no text")
    return RequestRecord(True, start, ttft, tuple(itl), latency, output_len, input_len)


def run_level(
    target: Endpoint,
    workload: Workload,
    concurrency: int,
    *,
    requests: int | None = None,
    duration_s: float | None = None,
    first_index: int = 0,
    on_done: Callable[[int], None] | None = None,
) -> tuple[list[RequestRecord], float]:
    """One level: ``concurrency`` requests in flight, each client sending its next one as
    soon as one ends, until ``requests`` were sent (or ``duration_s`` has passed). The
    records and the level's wall time (bench_serving's ``dur_s``)."""
    if (requests is None) == (duration_s is None):
        raise ValueError("a level runs for a number of requests or a duration")
    records: list[RequestRecord] = []
    lock = threading.Lock()
    counter = iter(range(first_index, first_index + (requests or 1 << 30)))
    deadline = time.monotonic() + duration_s if duration_s is not None else None

    def client() -> None:
        while deadline is None or time.monotonic() < deadline:
            with lock:
                index = next(counter, None)
            if index is None:
                return
            record = send(target, workload.prompt(index), workload.output_len)
            with lock:
                records.append(record)
                done = len(records)
            if on_done:
                on_done(done)

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for future in [pool.submit(client) for _ in range(concurrency)]:
            future.result()
    return sorted(records, key=lambda r: r.start), time.perf_counter() - began
