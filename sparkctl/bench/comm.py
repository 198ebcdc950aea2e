"""How much of each token a TP group spends in all-reduce: the model's shape times the
fabric's measured latency curve.

Megatron-style tensor parallelism (what SGLang runs) all-reduces the hidden state twice
a layer: after attention's output projection and after the MLP's down projection, each
rank holding a partial sum. A decode step carries one token of every running request,
so each all-reduce moves ``hidden_size x batch x element size`` bytes, and a step makes
``2 x layers`` of them, one after another on the token's path. A step yields one token
a request, so the step's time is the time per output token (TPOT).

The time of one all-reduce of a size is read off the curve ``sparkctl validate``
measured with nccl-tests (``all_reduce_perf`` from ``validate_nccl_latency_min_bytes``,
out-of-place time): interpolated on log-log axes between measured sizes, the smallest
size's time below them (latency's floor), and extrapolated linearly in bytes from the
last two sizes above them.

What this leaves out, and says so: SGLang's custom all-reduce and NCCL's choices at
run time may beat nccl-tests' figure at small sizes; computation and communication can
overlap; MoE layers add their own collectives (expert parallelism) that are not here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def allreduce_us(curve: Sequence[tuple[int, float]], size: int) -> float:
    """The measured curve's time (us) for one all-reduce of ``size`` bytes."""
    points = sorted((s, t) for s, t in curve if s > 0 and t > 0)
    if not points:
        raise ValueError("no all_reduce latency measured (sizes and times > 0)")
    if size <= points[0][0]:
        return points[0][1]
    exact = [t for s, t in points if s == size]
    if exact:
        return exact[0]
    for (s0, t0), (s1, t1) in itertools.pairwise(points):
        if s0 < size < s1:
            x = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return math.exp(math.log(t0) + x * (math.log(t1) - math.log(t0)))
    if len(points) == 1:
        return points[0][1] * size / points[0][0]
    (s0, t0), (s1, t1) = points[-2], points[-1]
    slope = (t1 - t0) / (s1 - s0) if s1 != s0 else t1 / s1
    return t1 + slope * (size - s1)


@dataclass(frozen=True)
class CommShare:
    """The all-reduce share of one output token at a batch size."""

    batch: float  # running requests a decode step carries
    message_bytes: int  # one all-reduce's size
    allreduces: int  # per decode step
    allreduce_us: float  # one, from the curve
    comm_ms: float  # per token: allreduces x allreduce_us
    token_ms: float  # the measured time per output token (TPOT)

    @property
    def share(self) -> float:
        return self.comm_ms / self.token_ms if self.token_ms > 0 else 0.0

    def line(self) -> str:
        return (
            f"communication ~ {self.comm_ms:.2f} ms of the {self.token_ms:.2f} ms per token "
            f"({self.share:.0%}): {self.allreduces} all-reduces of "
            f"{self.message_bytes} B ({self.allreduce_us:.0f} us each) at a batch of "
            f"{self.batch:.3g}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch": self.batch,
            "message_bytes": self.message_bytes,
            "allreduces_per_token": self.allreduces,
            "allreduce_us": round(self.allreduce_us, 3),
            "comm_ms_per_token": round(self.comm_ms, 4),
            "ms_per_token": round(self.token_ms, 4),
            "share": round(self.share, 4),
        }


def comm_share(
    *,
    hidden: int,
    layers: int,
    element_bytes: int,
    tp: int,
    batch: float,
    token_ms: float,
    curve: Sequence[tuple[int, float]],
) -> CommShare:
    """The communication share of a token for a model of ``hidden`` x ``layers`` (its
    activations ``element_bytes`` wide) at TP ``tp``, ``batch`` requests a step and a
    measured ``token_ms``. TP 1 has no all-reduce."""
    batch = max(1.0, batch)
    size = int(hidden * element_bytes * math.ceil(batch))
    if tp <= 1:
        return CommShare(batch, size, 0, 0.0, 0.0, token_ms)
    rounds = 2 * layers
    one = allreduce_us(curve, size)
    return CommShare(batch, size, rounds, one, rounds * one / 1000, token_ms)
