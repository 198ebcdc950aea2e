"""``sparkctl bench``: the served model under a fixed load, level by level, with every node
sampled while it runs; report.json and report.html in the run's directory.

For each concurrency level:

1. one sample of every node (:mod:`sparkctl.bench.sample`), then a sampler thread that
   takes one every ``interval_s`` while the level runs, and reads each group head's
   ``/metrics`` for SGLang's running and queued requests (serve watch's reader);
2. the level's requests (:func:`sparkctl.bench.load.run_level`) through the endpoint
   the clients use: the gateway where there is one, else the first group's head;
3. a last sample; the level's figures by bench_serving's definitions, each node's
   memory, GPU and twin rates, the communication share of a token
   (:mod:`sparkctl.bench.comm`: the model's shape read on the head, the all-reduce
   latency curve of validate's last-good run), and the nodes apart from their peers
   (:mod:`sparkctl.bench.pace`).

The run holds the inventory's lock as ``serve verify`` does: a serve up or upgrade
restarting ranks under a bench would measure the restart. A level whose requests fail
is reported with its errors and fails the run (exit 1), as does a baseline comparison
whose output tokens/s dropped by more than validate's baseline tolerance.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl import __version__, console
from sparkctl.bench import comm, pace
from sparkctl.bench.load import Workload, run_level
from sparkctl.bench.sample import (
    NodeSample,
    parse_sample,
    rates,
    sample_command,
    server_memory_command,
)
from sparkctl.bench.stats import LevelFigures, summarize
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.lock import inventory_lock
from sparkctl.paths import baseline_path, point_link, state_dir

if TYPE_CHECKING:
    from sparkctl.endpoint import Endpoint
    from sparkctl.inventory import Inventory
    from sparkctl.serve.cluster import Cluster, Group

SCHEMA = 1
REPORT_JSON = "report.json"
REPORT_HTML = "report.html"
LAST_GOOD = "bench-last-good"
SAMPLE_TIMEOUT_S = 15
REQUEST_S = 600.0  # one request's bound: a long output at concurrency on a slow group


@dataclass(frozen=True)
class Options:
    inventory: Inventory
    concurrency: tuple[int, ...] = (1, 4, 16)
    input_len: int = 128  # words of prompt
    output_len: int = 128  # tokens a request decodes
    requests: int | None = None  # per level; None with duration_s, else 8 x concurrency
    duration_s: float | None = None
    seed: int = 0
    interval_s: float = 1.0
    baseline: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    # bench-last-good follows the serving layout's runs, not --layouts' others
    record_last_good: bool = True

    def requests_for(self, concurrency: int) -> int | None:
        if self.duration_s is not None:
            return None
        return self.requests if self.requests is not None else max(8, 8 * concurrency)


# ------------------------------------------------------------------ sampling
@dataclass
class Sampler:
    """Every node's sample and every group's gauges, on a thread, until stopped."""

    cluster: Cluster
    commands: Mapping[str, str]
    groups: Sequence[Group]
    interval_s: float
    began: float  # the bench's monotonic start: the series' zero
    samples: dict[str, list[NodeSample]] = field(default_factory=dict)
    at: dict[str, list[float]] = field(default_factory=dict)  # seconds since began
    gauges: dict[str, list[tuple[float, float | None, float | None]]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def once(self) -> None:
        from sparkctl.serve.watch import read_metrics  # noqa: PLC0415

        out = self.cluster.each_own(self.commands, SAMPLE_TIMEOUT_S)
        now = time.monotonic() - self.began
        for node, (rc, text) in out.items():
            s = parse_sample(text)
            if s is None:
                self.errors[node] = f"rc {rc}: {text.strip()[-200:]}"
                continue
            self.samples.setdefault(node, []).append(s)
            self.at.setdefault(node, []).append(now)
        for g in self.groups:
            m, _ = read_metrics(g)
            if m is not None:
                self.gauges.setdefault(g.name, []).append((now, m.running, m.queued))

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.once()
            except (SparkctlError, OSError) as exc:  # the level goes on; the gap is said
                self.errors["sampler"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - began)))

    def start(self) -> None:
        self.once()
        self._thread = threading.Thread(target=self._loop, name="bench-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.once()


def node_commands(cluster: Cluster) -> dict[str, str]:
    out = {}
    for node in cluster.nodes:
        p = cluster.plan.node(node)
        s = p.sglang
        twins = [(t.twin, t.netdev, t.ibdev) for t in p.roce_fabric.twins]
        out[node] = sample_command(
            twins,
            fabric_addresses=[a for a in (p.fabric_a_ip, p.fabric_b_ip) if a],
            server_memory=server_memory_command(
                s.install_method, s.unit, s.engine, s.container_name
            ),
        )
    return out


def twin_line_bytes_per_s(cluster: Cluster) -> float | None:
    """One twin's line rate: validate's line rate (the port's) shared by the port's twins
    where the ranks move data over RDMA (a Spark's CX-7: 92.57 + 97.28 Gb/s over its two
    twins in NVIDIA's perftest guide), each twin's own where they use sockets (the lab's
    switch shapes each twin's port to validate_line_rate_gbytes). None: not set."""
    p = cluster.plan.node(cluster.head)
    line = p.validate.line_rate_gbytes
    if not line:
        return None
    twins = max(1, len(p.roce_fabric.twins))
    return line * 1e9 / (twins if p.nccl.rdma_expected else 1)


# ------------------------------------------------------------------ one level
def _series(sampler: Sampler, line: float | None) -> dict[str, list[dict[str, Any]]]:
    """Per node, each interval's twin utilisation (or bytes/s without a line rate)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for node, samples in sampler.samples.items():
        at = sampler.at[node]
        points = []
        for i in range(1, len(samples)):
            r = rates(samples[i - 1], samples[i])
            points.append(
                {
                    "t": round((at[i - 1] + at[i]) / 2, 2),
                    "twins": {
                        t: round(x.utilisation(line), 5) if line else None for t, x in r.items()
                    },
                    "bytes_per_s": {
                        t: round(max(x.rx_bytes_per_s, x.tx_bytes_per_s), 1) for t, x in r.items()
                    },
                }
            )
        out[node] = points
    return out


def _nodes(sampler: Sampler, line: float | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for node, samples in sampler.samples.items():
        first, last = samples[0], samples[-1]
        during = samples[1:] or samples

        def known(values: Sequence[float | int | None]) -> list[float]:
            return [float(v) for v in values if v is not None]

        mem = known([s.mem_available for s in samples])
        srv = known([s.server_memory for s in samples])
        util = known([s.gpu_util for s in during])
        power = known([s.power_w for s in during])
        clock = known([s.clock_sm_mhz for s in during])
        out[node] = {
            "mem_available_min_bytes": int(min(mem)) if mem else None,
            "server_memory_max_bytes": int(max(srv)) if srv else None,
            "gpu_util_pct": round(statistics.mean(util), 1) if util else None,
            "power_w": round(statistics.mean(power), 2) if power else None,
            "clock_sm_mhz": round(statistics.mean(clock), 0) if clock else None,
            # fabric peer address -> the share of the level its TCP connections had
            # data in flight (the socket transport's; empty over RDMA)
            "tcp_busy": {p: round(v, 4) for p, v in sorted(pace.busy_shares(samples).items())},
            # fabric peer address -> the fastest path-limited TCP delivery (Mb/s) and
            # how many such samples the level had
            "tcp_delivery": {
                p: {"mbps": round(bps / 1e6, 1), "samples": n}
                for p, (bps, n) in sorted(pace.deliveries(samples).items())
            },
            "twins": {
                t: {
                    **r.to_dict(),
                    "utilisation": round(r.utilisation(line), 5) if line else None,
                }
                for t, r in rates(first, last).items()
            },
        }
    return out


def _batch(sampler: Sampler, group: str, concurrency: int, groups: int) -> float:
    """The running requests a decode step carries: SGLang's gauge averaged over the
    level's samples that saw any, else the clients' concurrency over the groups."""
    seen = [r for _, r, _ in sampler.gauges.get(group, []) if r]
    return statistics.mean(seen) if seen else concurrency / max(1, groups)


def _gauges(sampler: Sampler) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for name, rows in sampler.gauges.items():
        running = [r for _, r, _ in rows if r is not None]
        queued = [q for _, _, q in rows if q is not None]
        out[name] = {
            "running_mean": round(statistics.mean(running), 2) if running else None,
            "running_max": max(running) if running else None,
            "queued_mean": round(statistics.mean(queued), 2) if queued else None,
            "queued_max": max(queued) if queued else None,
        }
    return out


@dataclass
class Context:
    """What every level shares."""

    cluster: Cluster
    endpoint: Endpoint
    workload: Workload
    opts: Options
    commands: Mapping[str, str]
    line: float | None
    shape: Mapping[str, Any] | None  # hidden, layers, element_bytes
    curve: Sequence[tuple[int, float]]
    began: float
    progress: Callable[[str], None] = console.progress


def run_one(ctx: Context, concurrency: int, first_index: int) -> dict[str, Any]:
    groups = ctx.cluster.groups()
    sampler = Sampler(ctx.cluster, ctx.commands, groups, ctx.opts.interval_s, ctx.began)
    requests = ctx.opts.requests_for(concurrency)
    total = f"/{requests} requests" if requests else f" requests ({ctx.opts.duration_s:g} s level)"
    step = max(1, requests // 4) if requests else 4 * concurrency

    def done(n: int) -> None:
        if n % step == 0:
            ctx.progress(f"concurrency {concurrency}: {n}{total}")

    sampler.start()
    t0 = time.monotonic() - ctx.began
    try:
        records, wall = run_level(
            ctx.endpoint,
            ctx.workload,
            concurrency,
            requests=requests,
            duration_s=ctx.opts.duration_s,
            first_index=first_index,
            on_done=done,
        )
    finally:
        sampler.stop()
    figures = summarize(records, wall)
    figs = {
        n: f
        for n, s in sampler.samples.items()
        if (f := pace.node_figures(n, s, ctx.line)) is not None
    }
    speed = ctx.cluster.plan.node(ctx.cluster.head).roce_fabric.speed_mbps
    addresses = {
        ip: node
        for node in ctx.cluster.nodes
        for ip in (ctx.cluster.plan.node(node).fabric_a_ip, ctx.cluster.plan.node(node).fabric_b_ip)
        if ip
    }
    found = pace.findings([g.members for g in groups], figs, speed_mbps=speed, addresses=addresses)
    shares = {}
    if ctx.shape and ctx.curve and figures.completed:
        for g in groups:
            share = comm.comm_share(
                hidden=ctx.shape["hidden"],
                layers=ctx.shape["layers"],
                element_bytes=ctx.shape["element_bytes"],
                tp=len(g.members),
                batch=_batch(sampler, g.name, concurrency, len(groups)),
                token_ms=figures.tpot_ms.p50,
                curve=ctx.curve,
            )
            shares[g.name] = share
    level = {
        "concurrency": concurrency,
        "started_s": round(t0, 2),
        "figures": figures.to_dict(),
        "comm": {name: s.to_dict() | {"line": s.line()} for name, s in shares.items()},
        "gauges": _gauges(sampler),
        "nodes": _nodes(sampler, ctx.line),
        "series": _series(sampler, ctx.line),
        "findings": [f.to_dict() for f in found],
        "pace_setter": found[0].to_dict() if found else None,
        "sample_errors": dict(sampler.errors),
    }
    ctx.progress(level_line(concurrency, figures, shares, found))
    return level


def level_line(
    concurrency: int,
    f: LevelFigures,
    shares: Mapping[str, comm.CommShare],
    found: Sequence[pace.Finding],
) -> str:
    line = (
        f"concurrency {concurrency}: {f.output_tokens_per_s:.1f} tok/s, "
        f"TTFT p50 {f.ttft_ms.p50:.0f} ms, ITL p50 {f.itl_ms.p50:.1f} ms"
        + (f", {f.errors} errors" if f.errors else "")
    )
    for share in list(shares.values())[:1]:
        line += f"; {share.line().split(':')[0]}"
    if found:
        line += f"; pace-setter {found[0].node} ({found[0].subject})"
    return line


# ------------------------------------------------------------------ inputs
def model_shape(cluster: Cluster) -> tuple[dict[str, Any] | None, str]:
    """hidden, layers and the activations' element size of the head's model; or None
    and why."""
    from sparkctl.collection import model_memory as mm  # noqa: PLC0415
    from sparkctl.model_plan import read_remote  # noqa: PLC0415

    head = cluster.head
    try:
        files = read_remote(cluster, head, cluster.sglang(head).model_path)
    except SparkctlError as exc:
        return None, f"the model's shape is not known: {exc}"
    if files.config is None:
        return None, f"{head}: no config.json in the model: the communication share is not known"
    try:
        shape = mm.shape_from_config(files.config)
    except ValueError as exc:
        return None, f"{head}: config.json: {exc}"
    return (
        {
            "architecture": shape.architecture,
            "hidden": shape.hidden,
            "layers": shape.layers,
            "dtype": shape.dtype,
            "element_bytes": shape.dtype_bytes,
        },
        "",
    )


def latency_curve(cluster: str) -> tuple[list[tuple[int, float]], str, str]:
    """validate's last-good all_reduce (all nodes) out-of-place time by size, every size
    it swept; the run's name; or empty and why."""
    from sparkctl import report as report_io  # noqa: PLC0415
    from sparkctl.report.model import LATENCY_MAX_BYTES, latency_rows  # noqa: PLC0415
    from sparkctl.validate.run import last_good_link as validate_last_good  # noqa: PLC0415

    link = validate_last_good(cluster)
    if not link.exists():
        return (
            [],
            "",
            "no validate run has passed yet (last-good): the communication share is not known",
        )
    try:
        report = report_io.load(link.resolve())
    except SparkctlError as exc:
        return [], "", f"last-good: {exc}"
    curve = [(size, oop) for size, oop, _ in latency_rows(report, max_bytes=None) if oop > 0]
    if not curve:
        return [], "", f"last-good ({link.resolve().name}) has no all_reduce sweep over every node"
    small = [s for s, _ in curve if s <= LATENCY_MAX_BYTES]
    note = (
        ""
        if small
        else f"last-good ({link.resolve().name}) swept all_reduce from {curve[0][0]} B: "
        "decode's sizes are extrapolated (validate_nccl_latency_min_bytes)"
    )
    return curve, link.resolve().name, note


# ------------------------------------------------------------------ the baseline
def last_good_link(cluster: str) -> Path:
    return state_dir() / "results" / cluster / LAST_GOOD


def load_report(path: Path) -> dict[str, Any]:
    """A bench report.json (its directory or the file), checked for what a comparison reads."""
    file = path / REPORT_JSON if path.is_dir() else path

    def bad(problem: str) -> SparkctlError:
        return SparkctlError(
            f"{file}: {problem}",
            ExitCode.BAD_INPUT,
            hint="pass a results directory of `sparkctl bench`, its report.json, or last-good",
        )

    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise bad("no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise bad(f"cannot read it: {exc}") from None
    except json.JSONDecodeError as exc:
        raise bad(f"not JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict) or data.get("kind") != "bench":
        raise bad("not a sparkctl bench report (no kind: bench)")
    if data.get("schema") != SCHEMA:
        raise bad(f"schema {data.get('schema')!r}, this sparkctl reads {SCHEMA}")
    levels = data.get("levels")
    if not isinstance(levels, list) or not all(
        isinstance(x, dict)
        and isinstance(x.get("concurrency"), int)
        and isinstance(x.get("figures"), dict)
        and isinstance(x["figures"].get("output_tokens_per_s"), (int, float))
        and isinstance(x["figures"].get("ttft_ms"), dict)
        for x in levels
    ):
        raise bad("its levels are not a bench report's (concurrency, figures)")
    return data


def resolve_baseline(value: str, cluster: str) -> Path:
    return baseline_path(
        value,
        last_good_link(cluster),
        what="bench",
        hint="a bench whose every request is answered becomes last-good",
    )


def compare(
    levels: Sequence[Mapping[str, Any]], base: Mapping[str, Any], where: str, tolerance: float
) -> dict[str, Any]:
    """Each level both runs have, by concurrency: output tokens/s and TTFT p50 against the
    baseline's; a drop of tokens/s beyond ``tolerance`` is a regression."""
    theirs = {x["concurrency"]: x["figures"] for x in base["levels"]}
    rows = []
    for x in levels:
        c, f = x["concurrency"], x["figures"]
        b = theirs.get(c)
        if b is None:
            continue
        tps, btps = f["output_tokens_per_s"], b["output_tokens_per_s"]
        ttft, bttft = f["ttft_ms"]["p50"], b["ttft_ms"].get("p50", 0)
        change = (tps - btps) / btps if btps else 0.0
        rows.append(
            {
                "concurrency": c,
                "output_tokens_per_s": tps,
                "baseline_output_tokens_per_s": btps,
                "change": round(change, 4),
                "ttft_p50_ms": ttft,
                "baseline_ttft_p50_ms": bttft,
                "ttft_change": round((ttft - bttft) / bttft, 4) if bttft else None,
                "regressed": change < -tolerance,
            }
        )
    return {
        "path": where,
        "run_id": base.get("run_id"),
        "tolerance": tolerance,
        "levels": rows,
        "regressed": [r["concurrency"] for r in rows if r["regressed"]],
    }


# ------------------------------------------------------------------ the run
def _endpoint_of(cluster: Cluster, http: Any) -> tuple[Endpoint, str]:
    from sparkctl.endpoint import Endpoint  # noqa: PLC0415

    key = cluster.api_key()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    gateway = cluster.gateway()
    if gateway is not None:
        return Endpoint(http, gateway.base_url, headers, cluster.model_name), "the gateway"
    g = cluster.groups()[0]
    return Endpoint(http, g.base_url, headers, cluster.model_name), f"group {g.name}'s head"


def _check_serving(endpoint: Endpoint, via: str, inventory: Path) -> None:
    import httpx  # noqa: PLC0415

    url = f"{endpoint.url}/v1/models"
    try:
        resp = endpoint.http.get(url, headers=dict(endpoint.headers))
    except httpx.HTTPError as exc:
        raise SparkctlError(
            f"{via} ({endpoint.url}) does not answer: {type(exc).__name__}: {str(exc)[:200]}",
            ExitCode.CHECKS_FAILED,
            hint=f"sparkctl serve status {inventory}; sparkctl serve up {inventory} serves it",
        ) from None
    if resp.status_code != 200:
        raise SparkctlError(
            f"{via}: GET /v1/models answered HTTP {resp.status_code}",
            ExitCode.CHECKS_FAILED,
            hint=f"sparkctl serve verify {inventory} says why",
        )


def bench(opts: Options) -> tuple[dict[str, Any], Path]:
    """Every level, report.json and report.html; the report and its directory."""
    from sparkctl.bench import html  # noqa: PLC0415
    from sparkctl.serve import probe  # noqa: PLC0415
    from sparkctl.serve.cluster import open_cluster  # noqa: PLC0415

    inv = opts.inventory
    base_path = resolve_baseline(opts.baseline, inv.cluster) if opts.baseline else None
    base = load_report(base_path) if base_path else None
    began = time.monotonic()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    notes: list[str] = []
    with inventory_lock(inv, "bench"):
        cluster = open_cluster(inv, "bench", opts.extra)
        groups = cluster.groups()
        ca = groups[0].tls_ca_file if cluster.gateway() is None else None
        with probe.client(ca, REQUEST_S) as http:
            endpoint, via = _endpoint_of(cluster, http)
            _check_serving(endpoint, via, inv.path)
            shape, why = model_shape(cluster)
            notes += [why] if why else []
            curve, latency_run, why = latency_curve(inv.cluster)
            notes += [why] if why else []
            smaller = sorted(
                {len(g.members) for g in groups if 1 < len(g.members) < len(inv.nodes)}
            )
            if curve and smaller:
                notes.append(
                    f"validate measured the all-reduce over all {len(inv.nodes)} Sparks; a group "
                    f"of {' or '.join(map(str, smaller))} all-reduces over fewer ranks (fewer "
                    "ring steps), so its communication share is an upper bound"
                )
            line = twin_line_bytes_per_s(cluster)
            if line is None:
                notes.append("validate_line_rate_gbytes is not set: twins in bytes/s, not a share")
            workload = Workload(opts.input_len, opts.output_len, opts.seed)
            ctx = Context(
                cluster, endpoint, workload, opts, node_commands(cluster), line, shape, curve, began
            )
            levels = []
            index = 0
            for c in opts.concurrency:
                levels.append(run_one(ctx, c, index))
                index += levels[-1]["figures"]["requests"]
        notes += level_notes(levels)
        tolerance = cluster.plan.node(cluster.head).validate.baseline_tolerance
        report: dict[str, Any] = {
            **report_head("bench", inv, cluster.run_dir, stamp, began),
            "endpoint": {"url": endpoint.url, "via": via, "model": endpoint.model},
            "groups": {g.name: list(g.members) for g in groups},
            "workload": workload_dict(opts),
            "model": shape,
            "latency_run": latency_run or None,
            "twin_line_bytes_per_s": line,
            "levels": levels,
            "baseline": compare(levels, base, str(base_path), tolerance) if base else None,
            "notes": notes,
        }
        report["verdict"] = verdict(report)
        run_dir = cluster.run_dir
        (run_dir / REPORT_JSON).write_text(json.dumps(report, indent=2) + "\n")
        (run_dir / REPORT_HTML).write_text(html.render(report))
        if report["verdict"] == "passed" and opts.record_last_good:
            point_link(last_good_link(inv.cluster), run_dir.name)
    return report, run_dir


def report_head(
    kind: str, inv: Inventory, run_dir: Path, stamp: str, began: float
) -> dict[str, Any]:
    """What every bench report opens with: its schema and kind, and the run."""
    return {
        "schema": SCHEMA,
        "kind": kind,
        "cluster": inv.cluster,
        "run_id": run_dir.name,
        "started": stamp,
        "duration_s": round(time.monotonic() - began, 2),
        "inventory": str(inv.path),
        "sparkctl_version": __version__,
    }


def workload_dict(opts: Options) -> dict[str, Any]:
    """The workload as report.json gives it: the same options, the same prompts."""
    return Workload(opts.input_len, opts.output_len, opts.seed).to_dict() | {
        "concurrency": list(opts.concurrency),
        "requests_per_level": opts.requests,
        "duration_s_per_level": opts.duration_s,
    }


def level_notes(levels: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the levels could not measure, or measured past what the model explains."""
    notes = []
    missing = sorted(
        {n for x in levels for n, v in x["nodes"].items() if v["server_memory_max_bytes"] is None}
    )
    if missing:
        notes.append(
            f"the server's own memory cgroup could not be read on {', '.join(missing)} "
            "(no memory controller at the container's scope, or no MemoryAccounting for "
            "the unit): MemAvailable only"
        )
    over = [
        f"concurrency {x['concurrency']}"
        for x in levels
        if any(c["share"] > 1 for c in x["comm"].values())
    ]
    if over:
        notes.append(
            f"at {', '.join(over)} the all-reduces alone, at validate's measured latency, "
            "take longer than a token did: the ranks' collectives run faster than "
            "nccl-tests measured them (SGLang's custom all-reduce, NCCL's choices at small "
            "sizes), so the share is an upper bound there"
        )
    return notes


def verdict(report: Mapping[str, Any]) -> str:
    """``errors`` (a request failed), ``regressed`` (tokens/s below the baseline's beyond
    the tolerance) or ``passed``."""
    if any(x["figures"]["errors"] for x in report["levels"]):
        return "errors"
    if report.get("baseline") and report["baseline"]["regressed"]:
        return "regressed"
    return "passed"


def failure(report: Mapping[str, Any], run_dir: Path) -> SparkctlError | None:
    where = run_dir / REPORT_HTML
    if report["verdict"] == "errors":
        bad = [
            f"concurrency {x['concurrency']}: {x['figures']['errors']} of "
            f"{x['figures']['requests']} failed ({'; '.join(x['figures']['error_samples'][:1])})"
            for x in report["levels"]
            if x["figures"]["errors"]
        ]
        return SparkctlError(
            "bench: requests failed: " + "; ".join(bad) + f" (report: {where})",
            ExitCode.CHECKS_FAILED,
        )
    if report["verdict"] == "regressed":
        b = report["baseline"]
        worst = min(b["levels"], key=lambda r: r["change"])
        return SparkctlError(
            f"bench: output tokens/s {worst['change']:+.0%} against {b['run_id']} at "
            f"concurrency {worst['concurrency']} (tolerance {b['tolerance']:.0%}; report: {where})",
            ExitCode.CHECKS_FAILED,
        )
    return None
