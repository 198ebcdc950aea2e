"""The stand-in's /metrics against the release's metric definitions.

``sparkctl serve watch`` and the alert rules read SGLang's Prometheus metrics
by name, type and label; in the lab they read the stand-in's. Every family the
stand-in exposes is looked up among the collectors the pinned release defines
(srt/observability/metrics_collector.py: ``SchedulerMetricsCollector`` and
``TokenizerMetricsCollector``, read from the installed wheel's source with
``ast``, as test_protocol.py reads its functions; importing the module pulls
in the GPU stack), and must match it: name, type, HELP text, the label names
of every sample (the collector's ``labels`` as the release builds them:
``SchedulerMetricsCollector.init_new`` and
``TokenizerManager.init_metric_collector_watchdog``, with the release's
defaults for priority scheduling, data parallelism and extra labels) and a
histogram's default buckets. The samples are the stand-in's own, after a
streamed and a non-streamed request, so every family it has is present.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkctl.serve import watch
from sparkctl_lab.standins.sglang import launch_server as ls
from sparkctl_lab.standins.sglang.engine import Engine, Model, Sampling
from sparkctl_lab.standins.sglang.rendezvous import Node
from sparkctl_lab.standins.sglang.server import App
from tests.contract.conftest import SGLangRelease

pytestmark = pytest.mark.contract

COLLECTOR = Path("srt/observability/metrics_collector.py")
TOKENIZER_MANAGER = Path("srt/managers/tokenizer_manager.py")
KINDS = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary"}


@dataclass(frozen=True)
class Definition:
    """One metric as the release's collector creates it."""

    collector: str
    kind: str
    documentation: str
    labelnames: tuple[str, ...]
    buckets: tuple[float, ...] | None


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    (found,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return found


def _function(tree: ast.AST, name: str) -> ast.FunctionDef:
    (found,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    return found


def _labels_literal(func: ast.FunctionDef) -> dict[str, None]:
    """The keys of ``labels = {...}`` in ``func``: the collector's base labels, in order."""
    (node,) = [
        n
        for n in ast.walk(func)
        if isinstance(n, ast.Assign)
        and [ast.unparse(t) for t in n.targets] == ["labels"]
        and isinstance(n.value, ast.Dict)
    ]
    assert isinstance(node.value, ast.Dict)
    return {ast.literal_eval(k): None for k in node.value.keys if k is not None}


def _default_buckets(init: ast.FunctionDef) -> dict[str, tuple[float, ...]]:
    """``if <name> is None: <name> = [...]`` in ``init``: each bucket parameter's default."""
    out = {}
    for n in ast.walk(init):
        if (
            isinstance(n, ast.If)
            and isinstance(n.test, ast.Compare)
            and isinstance(n.test.left, ast.Name)
            and len(n.body) == 1
            and isinstance(n.body[0], ast.Assign)
            and isinstance(n.body[0].value, ast.List)
        ):
            out[n.test.left.id] = tuple(float(v) for v in ast.literal_eval(n.body[0].value))
    return out


def _definitions(
    cls: ast.ClassDef, collector: str, labels: dict[str, None]
) -> dict[str, Definition]:
    init = _function(cls, "__init__")
    buckets = _default_buckets(init)
    out = {}
    for n in ast.walk(init):
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in KINDS):
            continue
        kw = {k.arg: k.value for k in n.keywords if k.arg}
        name = ast.literal_eval(kw["name"])
        # labels.keys(), list(labels.keys()) + [...], [*labels.keys(), ...], {"layer"}
        names = eval(compile(ast.Expression(kw["labelnames"]), name, "eval"), {"labels": labels})  # noqa: S307 - the release's own expression, over a dict of names
        bucket = kw.get("buckets")
        out[name] = Definition(
            collector=collector,
            kind=KINDS[n.func.id],
            documentation=ast.literal_eval(kw["documentation"]),
            labelnames=tuple(names),
            buckets=buckets.get(bucket.id) if isinstance(bucket, ast.Name) else None,
        )
    return out


def release_metrics(package: Path) -> tuple[dict[str, Definition], tuple[str, ...]]:
    """Every metric of the scheduler's and the tokenizer's collectors, and the modes of
    ``realtime_tokens_total`` (increment_realtime_tokens)."""
    tree = ast.parse((package / COLLECTOR).read_text(), str(COLLECTOR))
    sched = _class(tree, "SchedulerMetricsCollector")
    tok = _class(tree, "TokenizerMetricsCollector")
    tok_labels = _labels_literal(
        _function(
            ast.parse((package / TOKENIZER_MANAGER).read_text()), "init_metric_collector_watchdog"
        )
    )
    defs = {
        **_definitions(sched, "scheduler", _labels_literal(_function(sched, "init_new"))),
        **_definitions(tok, "tokenizer", tok_labels),
    }
    inc = _function(sched, "increment_realtime_tokens")
    (loop,) = [n for n in ast.walk(inc) if isinstance(n, ast.For)]
    assert isinstance(loop.iter, ast.List)
    modes = tuple(ast.literal_eval(elt.elts[0]) for elt in loop.iter.elts)  # type: ignore[attr-defined]
    return defs, modes


@pytest.fixture(scope="module")
def release(sglang_release: SGLangRelease) -> tuple[dict[str, Definition], tuple[str, ...]]:
    return release_metrics(sglang_release.package_dir)


@pytest.fixture(scope="module")
def standin_text() -> str:
    """The stand-in's /metrics body after a non-streamed and a streamed request (one rank:
    the forward passes need no peer)."""
    args = ls.parse_args(
        ["--model-path", "/models/toy", "--served-model-name", "toy", "--enable-metrics"]
    )
    node = Node(args=args, rank=0, nnodes=1, dist_host="", dist_port=0, timeout=10)
    model = Model(path="/models/toy", hidden_size=64, num_layers=1)
    engine = Engine(node, model, total_tokens=100_000)
    engine.start()
    engine.status = "Up"
    list(engine.generate("one two three", Sampling(max_new=8, ignore_eos=True)))
    list(engine.generate("four five", Sampling(max_new=8, ignore_eos=True), stream=True))
    return App(engine, args, model, available=100.0).metrics()


def _sample_name(family: Any) -> str:
    """The release's name of a parsed family (prometheus_client drops a counter's _total)."""
    return f"{family.name}_total" if family.type == "counter" else str(family.name)


def test_every_standin_metric_is_the_releases(
    release: tuple[dict[str, Definition], tuple[str, ...]], standin_text: str
) -> None:
    defs, modes = release
    families = list(text_string_to_metric_families(standin_text))
    assert families, "the stand-in exposed nothing"
    problems = []
    for fam in families:
        name = _sample_name(fam)
        d = defs.get(name)
        if d is None:
            problems.append(f"{name}: not a metric of sglang's collectors")
            continue
        if (fam.type, fam.documentation) != (d.kind, d.documentation):
            problems.append(
                f"{name}: {fam.type} {fam.documentation!r}, the release's: "
                f"{d.kind} {d.documentation!r}"
            )
        for s in fam.samples:
            got = tuple(k for k in s.labels if k != "le" or not s.name.endswith("_bucket"))
            if got != d.labelnames:
                problems.append(f"{s.name}: labels {got}, the release's {d.labelnames}")
        if d.kind == "histogram":
            les = sorted({float(s.labels["le"]) for s in fam.samples if s.name.endswith("_bucket")})
            if tuple(les) != (*(d.buckets or ()), math.inf):
                problems.append(f"{name}: buckets {les}, the release's {d.buckets}")
        if name == watch.REALTIME_TOKENS:
            unknown = {s.labels["mode"] for s in fam.samples} - set(modes)
            if unknown:
                problems.append(f"{name}: modes {sorted(unknown)}, the release's {modes}")
    assert not problems, "\n".join(problems)


def test_the_watchdogs_metrics_are_the_releases_and_the_standin_has_them(
    release: tuple[dict[str, Definition], tuple[str, ...]], standin_text: str
) -> None:
    """serve watch's names (sparkctl/serve/watch.py) are the release's, with the labels it
    reads; the stand-in exposes each after the requests it served."""
    defs, modes = release
    assert defs[watch.REALTIME_TOKENS].labelnames[-1] == "mode"
    assert set(watch.DECODE_MODES | watch.PREFILL_MODES) <= set(modes)
    for name in (watch.GENERATION_TOKENS, watch.PROMPT_TOKENS):
        assert defs[name].collector == "tokenizer" and "is_streaming" in defs[name].labelnames
    for name in (watch.RUNNING_REQS, watch.QUEUE_REQS):
        assert defs[name].kind == "gauge" and "tp_rank" in defs[name].labelnames
    exposed = {_sample_name(f) for f in text_string_to_metric_families(standin_text)}
    wanted = {
        watch.REALTIME_TOKENS,
        watch.GENERATION_TOKENS,
        watch.PROMPT_TOKENS,
        watch.RUNNING_REQS,
        watch.QUEUE_REQS,
    }
    assert wanted <= exposed, sorted(wanted - exposed)
