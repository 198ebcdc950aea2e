"""serve upgrade's gate after a swap: golden prompts, serving figures, a bounded load.

The gate follows the strongest public promotion runbook for a served model
(SparkRing's, as its users describe it): greedy completions whose hashes must
equal the previous version's, a bounded load at concurrency 1, 2 and 8 with
zero errors, health and model identity unchanged afterwards.

- **Golden prompts** (``sglang_golden_prompts``): each prompt is sent with
  ``temperature 0`` (greedy) and a fixed ``seed``; an item's ``contains`` words
  must be in the answer, and with ``same: true`` the answer's SHA-256 must equal
  the previous version's, recorded on the same group before its swap. Greedy
  output of the same weights on the same build is deterministic only as far as
  the kernels are (SGLang documents batch-invariant ops for bit-exact answers,
  ``--enable-deterministic-inference``); the answer is sent alone, so no
  batching changes it between the two runs.
- **Figures**: serve verify's median time to first token and decode tokens/s
  (sparkctl.serve.verify.Verifier.timing), held to the previous version's
  within ``sglang_upgrade_tolerance``.
- **Bounded load**: ``sglang_upgrade_load_requests`` chat completions at each
  concurrency of ``sglang_upgrade_load_concurrency``; one failed request fails
  the gate.

Every function here is pure over HTTP answers and recorded figures, so the
decisions are unit-tested on recorded outcomes (tests/unit/test_upgrade.py).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from sparkctl.endpoint import Endpoint
from sparkctl.plan import GoldenPrompt
from sparkctl.report.model import Check

SEED = 0  # SGLang's sampling_params.sampling_seed, via the OpenAI "seed"
LOAD_PROMPT = "Name three things a tensor-parallel group shares across its ranks."
LOAD_MAX_TOKENS = 16
REQUEST_S = 120.0


@dataclass(frozen=True)
class Answer:
    """One golden prompt's answer: the text, and its SHA-256 (what ``same`` compares)."""

    prompt: str
    text: str
    error: str = ""

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "sha256": self.digest, "error": self.error}


def _chat(ep: Endpoint, prompt: str, max_tokens: int, *, greedy: bool) -> str:
    body: dict[str, Any] = {
        "model": ep.model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
    }
    if greedy:
        body |= {"temperature": 0, "seed": SEED}
    resp = ep.http.post(f"{ep.url}/v1/chat/completions", json=body, headers=dict(ep.headers))
    if resp.status_code != 200:
        raise ValueError(f"HTTP {resp.status_code}: {resp.text[:120]!r}")
    doc = resp.json()
    text = doc["choices"][0]["message"]["content"]
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"an empty answer: {resp.text[:120]!r}")
    return text


def ask(ep: Endpoint, prompts: Sequence[GoldenPrompt]) -> list[Answer]:
    """Every golden prompt sent greedy, one at a time; an error is kept as the answer's."""
    out = []
    for p in prompts:
        try:
            out.append(Answer(p.prompt, _chat(ep, p.prompt, p.max_tokens, greedy=True)))
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            out.append(Answer(p.prompt, "", f"{type(exc).__name__}: {exc}"))
    return out


def judge(
    host: str,
    prompts: Sequence[GoldenPrompt],
    after: Sequence[Answer],
    before: Sequence[Answer] | None,
) -> list[Check]:
    """One check per golden prompt: its words in the new answer, and with ``same`` its
    hash equal to the previous version's answer (``before``, same order)."""
    checks = []
    for i, (p, a) in enumerate(zip(prompts, after, strict=True)):
        subject = f"golden {i + 1}"
        if a.error:
            checks.append(Check("golden", host, subject, "failed", f"no answer: {a.error}"))
            continue
        missing = [w for w in p.contains if w not in a.text]
        problems = [f"lacks {', '.join(repr(w) for w in missing)}"] if missing else []
        if p.same:
            old = before[i] if before is not None and i < len(before) else None
            if old is None or old.error:
                problems.append("no answer of the previous version to compare with")
            elif old.digest != a.digest:
                problems.append(
                    f"answer sha256 {a.digest[:12]} differs from the previous version's "
                    f"{old.digest[:12]}"
                )
        seen = f"{a.text[:60]!r}"
        checks.append(
            Check(
                "golden",
                host,
                subject,
                "failed" if problems else "passed",
                ("; ".join(problems) + f": {seen}") if problems else f"as expected: {seen}",
            )
        )
    return checks


def compare_figures(
    host: str, before: Mapping[str, float], after: Mapping[str, float], tolerance: float
) -> list[Check]:
    """serve verify's figures of the new version against the previous one's: time to
    first token at most (1 + tolerance) x, decode tokens/s at least 1 / (1 + tolerance) x.
    Skipped when either version has no figure (a group that was not measured)."""
    checks = []
    for key, higher_is_worse in (("ttft_s", True), ("decode_tokens_per_s", False)):
        old, new = before.get(key), after.get(key)
        if not old or new is None:
            checks.append(
                Check("figures", host, key, "skipped", "no figure of the previous version")
            )
            continue
        ratio = new / old
        worse = ratio > 1 + tolerance if higher_is_worse else ratio < 1 / (1 + tolerance)
        checks.append(
            Check(
                "figures",
                host,
                key,
                "failed" if worse else "passed",
                f"{new:.3f} against {old:.3f} before ({ratio:.2f}x; tolerance {tolerance:.0%})",
            )
        )
    return checks


@dataclass
class Load:
    """The bounded load at one concurrency: requests sent, failed, and the first errors."""

    concurrency: int
    sent: int = 0
    failed: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "sent": self.sent,
            "failed": self.failed,
            "seconds": round(self.seconds, 3),
            "errors": self.errors[:3],
        }


def bounded_load(
    send: Callable[[], None], concurrencies: Sequence[int], requests: int
) -> list[Load]:
    """``requests`` calls of ``send`` at each concurrency (``send`` raises on a failed
    request); every level runs to its end, so the report counts them all."""
    out = []
    for c in concurrencies:
        load, lock = Load(c), threading.Lock()

        def one(load: Load = load, lock: threading.Lock = lock) -> None:
            try:
                send()
                err = ""
            except Exception as exc:
                err = f"{type(exc).__name__}: {exc}"
            with lock:
                load.sent += 1
                if err:
                    load.failed += 1
                    load.errors.append(err)

        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=c) as pool:
            for _ in range(requests):
                pool.submit(one)
        load.seconds = time.monotonic() - t0
        out.append(load)
    return out


def load_checks(host: str, loads: Sequence[Load]) -> list[Check]:
    return [
        Check(
            "bounded_load",
            host,
            f"concurrency {ld.concurrency}",
            "failed" if ld.failed else "passed",
            f"{ld.sent - ld.failed} of {ld.sent} answered in {ld.seconds:.1f} s"
            + (f"; first error: {ld.errors[0]}" if ld.errors else ""),
        )
        for ld in loads
    ]


def load_sender(ep: Endpoint) -> Callable[[], None]:
    """One chat completion of the bounded load (raises when it is not answered)."""

    def send() -> None:
        _chat(ep, LOAD_PROMPT, LOAD_MAX_TOKENS, greedy=False)

    return send
