"""sparkctl bench's figures are sglang.bench_serving's: the release's own
``calculate_metrics`` (sglang 0.5.17, sglang/benchmark/serving.py), run on the requests
of tests/unit/test_bench_stats.py, gives the figures sparkctl.bench.stats gives.

The module itself cannot be imported in the contract venv: its imports reach sglang.srt,
whose MoE runner calls ``torch.compile`` at import time, which the triton stub cannot
serve (and HF ``datasets``). So the function and the two dataclasses it uses are taken
from the release's source file as they are (``ast``), and run with numpy."""

from __future__ import annotations

import ast
import dataclasses
import typing
import warnings
from typing import Any

import numpy as np
import pytest

from sparkctl.bench.stats import summarize
from tests.contract.conftest import SGLangRelease
from tests.unit.test_bench_stats import RECORDS

pytestmark = pytest.mark.contract

_TAKEN = ("RequestFuncOutput", "BenchmarkMetrics", "calculate_metrics")


def _release_code(release: SGLangRelease) -> dict[str, Any]:
    source = (release.package_dir / "benchmark" / "serving.py").read_text()
    tree = ast.parse(source)
    nodes: list[ast.stmt] = [
        n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in _TAKEN
    ]
    names = sorted(n.name for n in nodes if isinstance(n, (ast.FunctionDef, ast.ClassDef)))
    assert names == sorted(_TAKEN), "the release moved its metrics"
    namespace: dict[str, Any] = {
        "np": np,
        "warnings": warnings,
        "dataclass": dataclasses.dataclass,
        "field": dataclasses.field,
        "TERM_PLOTLIB_AVAILABLE": False,
        **{name: getattr(typing, name) for name in ("Any", "Dict", "List", "Optional", "Tuple")},
        # annotations the taken code names but never calls
        "DatasetRow": object,
        "PreTrainedTokenizerBase": object,
        "RequestFuncInput": object,
    }
    exec(compile(ast.Module(body=nodes, type_ignores=[]), "serving.py", "exec"), namespace)  # noqa: S102
    return namespace


class _Row:
    """What calculate_metrics reads of a dataset row."""

    def __init__(self, prompt_len: int) -> None:
        self.prompt_len = self.text_prompt_len = prompt_len
        self.vision_prompt_len = 0


class _Words:
    """What calculate_metrics asks of a tokenizer (the retokenized counts, unused here)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[str]:
        return text.split()


def test_the_releases_calculate_metrics_gives_sparkctls_figures(
    sglang_release: SGLangRelease,
) -> None:
    code = _release_code(sglang_release)
    outputs = [
        code["RequestFuncOutput"](
            success=r.success,
            latency=r.latency,
            ttft=r.ttft,
            itl=list(r.itl),
            output_len=r.output_len,
            error=r.error,
        )
        for r in RECORDS
    ]
    rows = [_Row(r.input_len) for r in RECORDS]
    theirs, _ = code["calculate_metrics"](rows, outputs, 2.0, _Words(), "sglang-oai")
    ours = summarize(RECORDS, 2.0)
    assert theirs.completed == ours.completed
    assert theirs.total_output == ours.output_tokens
    assert theirs.output_throughput == pytest.approx(ours.output_tokens_per_s)
    assert theirs.request_throughput == pytest.approx(ours.requests_per_s)
    assert theirs.input_throughput == pytest.approx(ours.input_tokens_per_s)
    for name, spread in {
        "ttft": ours.ttft_ms,
        "itl": ours.itl_ms,
        "tpot": ours.tpot_ms,
        "e2e_latency": ours.e2e_ms,
    }.items():
        assert getattr(theirs, f"mean_{name}_ms") == pytest.approx(spread.mean), name
        assert getattr(theirs, f"median_{name}_ms") == pytest.approx(spread.p50), name
        assert getattr(theirs, f"p99_{name}_ms") == pytest.approx(spread.p99), name
