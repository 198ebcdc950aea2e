"""The gateway, the real one: the pinned smg wheel in front of two stand-in TP groups.

smg (the Shepherd Model Gateway, PyPI) is started here exactly as the sglang
role's gateway unit starts it: the role's launcher (files/sglang_launcher.py,
``--module smg.launch_router``) with the key from a secrets file and the
arguments of the role's filter (plugins/filter/sglang_gateway.py). Two groups of
two stand-in ranks each (the stand-in's own harness, tests/unit/
test_sglang_standin.py) serve behind it, and sparkctl's control-plane client
(sparkctl.serve.gateway) registers, lists and removes their heads.

What is held here, against the wheel itself:

- every argument the role gives smg is one its parser takes, with the value the
  role meant (smg's own ``parse_router_args``);
- what the gateway asks of a head (its discovery and health requests, seen in
  the heads' access logs), the stand-in answers as the pinned SGLang release
  does: a route the release has (read from its http_server.py) is answered, a
  route it lacks is a 404 (smg falls back, as it must on a real head);
- a head registered by sparkctl becomes one ``sglang`` worker serving the
  group's model, requests through the gateway reach both groups, the key gates
  the data plane and reaches the heads, and it is in no process's command line
  and no line of the gateway's output;
- a head taken out gets no new request; a group whose rank is frozen leaves
  rotation by the gateway's own health checks and comes back when it answers.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkctl.bench.load import Workload, send
from sparkctl.endpoint import Endpoint
from sparkctl.serve import gateway
from sparkctl.serve.gateway import Gateway
from tests.contract.conftest import SGLangRelease
from tests.unit.pathload import load_file
from tests.unit.ports import free_port
from tests.unit.test_sglang_standin import (  # the stand-in's own harness
    KEY,
    Cluster,
    _up,
    cluster,
    model_dir,  # noqa: F401 -- a fixture, used by name
    needs_loopback,
)

pytestmark = [pytest.mark.contract, needs_loopback]

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "ansible_collections" / "sparkctl" / "spark" / "roles" / "sglang"
LAUNCHER = ROLE / "files" / "sglang_launcher.py"
FILTER = REPO / "ansible_collections/sparkctl/spark/plugins/filter/sglang_gateway.py"
ACCESS = re.compile(r'INFO: +\S+ - "(?P<method>[A-Z]+) (?P<path>\S+) HTTP/1\.1" (?P<status>\d+)')
# Quick health checks for this test only (the role's values are 30 s apart: the
# lab holds those): out after 2 failures 1 s apart, back after 2 successes.
FAST_HEALTH = {
    "interval_secs": 1,
    "timeout_secs": 2,
    "failure_threshold": 2,
    "success_threshold": 2,
}


def role_filter() -> Any:
    return load_file("sglang_gateway_filter", FILTER)


# ------------------------------------------------------ the release's routes
def _decorated_routes(path: Path, obj: str) -> dict[str, set[str]]:
    """path -> methods of the routes ``obj`` registers by decorator in ``path``
    (``@obj.get``, ``@obj.post``, ``@obj.api_route(path, methods=[...])``; a path from
    ``os.environ.get(NAME, default)`` is its default)."""
    routes: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for dec in node.decorator_list:
            if not (
                isinstance(dec, ast.Call)
                and isinstance(dec.func, ast.Attribute)
                and isinstance(dec.func.value, ast.Name)
                and dec.func.value.id == obj
                and dec.args
            ):
                continue
            first = dec.args[0]
            if isinstance(first, ast.Call) and len(first.args) == 2:  # os.environ.get(N, d)
                first = first.args[1]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            kind = dec.func.attr
            if kind in ("get", "post", "put", "delete"):
                methods = {kind.upper()}
            elif kind == "api_route":
                given = next((k.value for k in dec.keywords if k.arg == "methods"), None)
                methods = set(ast.literal_eval(given)) if given is not None else {"GET"}
            else:
                continue
            routes.setdefault(first.value, set()).update(methods)
    return routes


def release_routes(package_dir: Path) -> dict[str, set[str]]:
    """path -> methods of every route the release's API server answers: http_server.py's
    own, those of the routers it includes (``app.include_router(NAME)``, NAME imported
    ``from sglang.srt.entrypoints.X import router as NAME``: v1_loads.py's /v1/loads),
    and /metrics, which ``add_prometheus_middleware`` mounts with --enable-metrics
    (srt/utils/common.py ``Mount("/metrics", ...)``)."""
    http = package_dir / "srt" / "entrypoints" / "http_server.py"
    routes = _decorated_routes(http, "app")
    tree = ast.parse(http.read_text(), str(http))
    imported = {
        alias.asname or alias.name: node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    included = [
        node.args[0].id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "include_router"
        and node.args
        and isinstance(node.args[0], ast.Name)
    ]
    assert included, "http_server.py includes no router: the release changed its layout"
    for name in included:
        module = imported[name]
        source = package_dir.parent / (module.replace(".", "/") + ".py")
        for path, methods in _decorated_routes(source, "router").items():
            routes.setdefault(path, set()).update(methods)
    common = (package_dir / "srt" / "utils" / "common.py").read_text()
    if "add_prometheus_middleware(app)" in http.read_text() and 'Mount("/metrics"' in common:
        routes.setdefault("/metrics", set()).add("GET")
    return routes


def asked(c: Cluster) -> list[tuple[str, str, int]]:
    """(method, path, status) of every request the head's access log shows."""
    return [
        (m["method"], m["path"], int(m["status"]))
        for m in (ACCESS.search(line) for line in c.log(0).splitlines())
        if m
    ]


# --------------------------------------------------------------- the gateway
class Smg:
    """The gateway process as the role's unit runs it, its log in a file."""

    def __init__(self, venv: Path, tmp: Path, *, policy: str, health: dict[str, int]) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        self.log = tmp / "smg.log"
        secrets = tmp / "sglang-secrets.env"
        secrets.write_text(f"SGLANG_API_KEY={KEY}\n")
        secrets.chmod(0o600)
        f = role_filter()
        args = f.sglang_gateway_args(
            host="127.0.0.1",
            port=self.port,
            metrics_host="127.0.0.1",
            metrics_port=self.metrics_port,
            policy=policy,
            health=health,
            api_key=True,
        )
        self.argv = f.sglang_gateway_exec_argv(
            args,
            python=str(venv / "bin" / "python"),
            launcher=str(LAUNCHER),
            secrets_file=str(secrets),
        )
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp),
            "PYTHONDONTWRITEBYTECODE": "1",
            "RUST_LOG": "info",
        }
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.base_url = f"http://127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.log.read_bytes().decode(errors="replace")

    def wait_up(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"smg exited {self.proc.returncode}:\n{self.text()}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/liveness", timeout=2).status_code == 200:
                    return
            time.sleep(0.2)
        raise AssertionError(f"smg did not answer /liveness in {timeout} s:\n{self.text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def chat(base_url: str, content: str, key: str | None = KEY) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(
        f"{base_url}/v1/chat/completions",
        json={"model": "toy", "messages": [{"role": "user", "content": content}], "max_tokens": 4},
        headers=headers,
        timeout=30,
    )


def chats_seen(c: Cluster) -> int:
    return sum(1 for m, p, _ in asked(c) if m == "POST" and p == "/v1/chat/completions")


@contextlib.contextmanager
def two_groups(tmp: Path, model: Path) -> Iterator[tuple[Cluster, Cluster]]:
    (tmp / "a").mkdir()
    (tmp / "b").mkdir()
    with cluster(tmp / "a", model, 2) as a, cluster(tmp / "b", model, 2) as b:
        _up(a)
        _up(b)
        yield a, b


@pytest.fixture
def smg(smg_venv: Path, tmp_path: Path) -> Iterator[Smg]:
    gw = Smg(smg_venv, tmp_path, policy="round_robin", health=FAST_HEALTH)
    try:
        gw.wait_up()
        yield gw
    finally:
        gw.stop()


# --------------------------------------------------------------------- tests
def test_every_argument_of_the_role_is_one_smg_parses_as_meant(smg_venv: Path) -> None:
    """The role's command line through smg 1.13.0's own parser (smg.launch_router
    parse_router_args), with the role's defaults: each value lands in the field the
    role meant. A flag smg does not know fails here, not on a Spark."""
    f = role_filter()
    args = f.sglang_gateway_args(port=30080, metrics_port=29000)
    code = (
        "import json, sys\n"
        "from smg.launch_router import parse_router_args\n"
        "a = parse_router_args(sys.argv[1:])\n"
        "keys = ['host', 'port', 'policy', 'health_check_endpoint', "
        "'health_check_interval_secs', 'health_check_timeout_secs', "
        "'health_failure_threshold', 'health_success_threshold', 'request_timeout_secs', "
        "'prometheus_host', 'prometheus_port', 'disable_tokenizer_autoload', "
        "'worker_urls', 'api_key', 'remove_unhealthy_workers']\n"
        "print(json.dumps({k: getattr(a, k) for k in keys}))\n"
    )
    proc = subprocess.run(
        [str(smg_venv / "bin" / "python"), "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsed = json.loads(proc.stdout.strip().splitlines()[-1])
    defaults = f.HEALTH_DEFAULTS
    assert parsed == {
        "host": "0.0.0.0",  # noqa: S104
        "port": 30080,
        "policy": "cache_aware",
        "health_check_endpoint": defaults["endpoint"],
        "health_check_interval_secs": defaults["interval_secs"],
        "health_check_timeout_secs": defaults["timeout_secs"],
        "health_failure_threshold": defaults["failure_threshold"],
        "health_success_threshold": defaults["success_threshold"],
        "request_timeout_secs": 1800,
        "prometheus_host": "0.0.0.0",  # noqa: S104
        "prometheus_port": 29000,
        "disable_tokenizer_autoload": True,
        "worker_urls": [],
        "api_key": None,  # the launcher appends it in memory
        "remove_unhealthy_workers": False,
    }


def test_two_groups_behind_the_real_gateway(
    smg: Smg,
    sglang_release: SGLangRelease,
    tmp_path: Path,
    model_dir: Path,  # noqa: F811
) -> None:
    with two_groups(tmp_path, model_dir) as (a, b):
        url_a, url_b = f"http://127.0.0.1:{a.port}", f"http://127.0.0.1:{b.port}"
        gw = Gateway(smg.base_url, KEY)
        assert gw.workers() == []

        # registered by sparkctl: one sglang worker per head, serving the group's model
        took = {}
        for url in (url_a, url_b):
            worker, took[url] = gateway.join(gw, url, 60)
            assert (worker.status, worker.runtime, worker.models) == ("ready", "sglang", ("toy",))
        print(f"\nregistered and ready: {took[url_a]:.1f} s and {took[url_b]:.1f} s")
        assert gateway.join(gw, url_a, 60)[1] == 0.0  # ready already: left alone

        # what the gateway asked of a head, answered as the release answers it
        routes = release_routes(sglang_release.package_dir)
        seen = {(m, p.split("?")[0], s) for m, p, s in asked(a) + asked(b)}
        assert {("GET", "/health")} <= {(m, p) for m, p, _ in seen}, seen
        for method, path, status in sorted(seen):
            if path.startswith("/v1/chat"):
                continue
            known = method in routes.get(path, set())
            assert (status != 404) == known, (
                f"the gateway asked {method} {path}: the stand-in answered {status}, "
                f"the release {'has' if known else 'has no'} that route"
            )

        # requests through the gateway reach both groups; the key gates them
        before = chats_seen(a), chats_seen(b)
        for i in range(8):
            resp = chat(smg.base_url, f"hello {i}")
            assert resp.status_code == 200, resp.text
            assert resp.json()["choices"][0]["message"]["content"]
        after = chats_seen(a), chats_seen(b)
        assert after[0] > before[0] and after[1] > before[1], (before, after)
        assert sum(after) - sum(before) == 8
        for key in (None, "wrong-key-0123456789"):
            assert chat(smg.base_url, "no key", key).status_code == 401

        # the bench's request (bench_serving's, less best_of, which smg refuses on a
        # stream) through the gateway: streamed, every token counted
        with httpx.Client(timeout=30) as http:
            target = Endpoint(http, smg.base_url, {"Authorization": f"Bearer {KEY}"}, "toy")
            sent = send(target, Workload(8, 6).prompt(0), 6)
        assert sent.success, sent.error
        assert sent.output_len == 6 and sent.ttft > 0 and len(sent.itl) >= 1

        # taken out: no new request reaches it
        assert gateway.leave(gw, url_b, 30)
        assert [w.url for w in gw.workers()] == [url_a]
        before = chats_seen(a), chats_seen(b)
        for i in range(4):
            assert chat(smg.base_url, f"after leave {i}").status_code == 200
        assert (chats_seen(a) - before[0], chats_seen(b) - before[1]) == (4, 0)
        assert not gateway.leave(gw, url_b, 30)

        # a frozen rank: the group leaves rotation by the gateway's own checks
        gateway.join(gw, url_b, 60)
        os.kill(a.procs[1].pid, signal.SIGSTOP)
        try:
            frozen = time.monotonic()
            gw.wait(url_a, lambda w: w is not None and not w.ready, 60, "out of rotation")
            left = time.monotonic() - frozen
            before_b = chats_seen(b)
            for i in range(3):
                assert chat(smg.base_url, f"while frozen {i}").status_code == 200
            assert chats_seen(b) - before_b == 3
        finally:
            os.kill(a.procs[1].pid, signal.SIGCONT)
        back = time.monotonic()
        gw.wait(url_a, lambda w: w is not None and w.ready, 60, "back in rotation")
        rejoined = time.monotonic() - back
        print(f"frozen group out of rotation after {left:.1f} s, back {rejoined:.1f} s")

        # the key: in no command line, in no line the gateway printed
        out = smg.text()
        assert KEY not in out, "the key is in the gateway's output"
        for pid in _tree(smg.proc.pid):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            assert KEY not in cmdline, (pid, cmdline)
            assert "smg" in cmdline or "launcher" in cmdline

        # its metrics: the names the docs and the alerts use
        metrics = httpx.get(f"http://127.0.0.1:{smg.metrics_port}/metrics", timeout=10).text
        for name in ("smg_worker_health", "smg_http_requests_total"):
            assert re.search(rf"^{name}\{{", metrics, re.M), (name, metrics[:3000])


def test_the_stand_ins_v1_loads_is_the_release_snapshot(
    sglang_release: SGLangRelease,
    tmp_path: Path,
    model_dir: Path,  # noqa: F811
) -> None:
    """/v1/loads, which the gateway polls for load (the release's v1_loads.py): the
    answer's keys from the route's return statement, each load's core keys and sections
    from the release's LoadSnapshot structs, ``include`` honoured, a bad section a 400."""
    release = sglang_release.json(
        "import json\n"
        "from sglang.srt.managers import load_snapshot as l\n"
        "print(json.dumps({'core': list(l._CORE_KEYS),"
        " 'memory': list(l.MemoryMetrics.__struct_fields__),"
        " 'queues': list(l.QueueMetrics.__struct_fields__),"
        " 'disaggregation': list(l.DisaggregationMetrics.__struct_fields__)}))"
    )
    source = sglang_release.package_dir / "srt" / "entrypoints" / "v1_loads.py"
    (func,) = [
        n
        for n in ast.walk(ast.parse(source.read_text()))
        if isinstance(n, ast.AsyncFunctionDef) and n.name == "get_loads"
    ]
    (answer,) = [
        n.value
        for n in ast.walk(func)
        if isinstance(n, ast.Return) and isinstance(n.value, ast.Dict)
    ]
    top = [k.value for k in answer.keys if isinstance(k, ast.Constant)]
    with cluster(tmp_path, model_dir, 2) as c:
        _up(c)
        status, doc = c.json("GET", "/v1/loads?include=core,disagg,queues,memory")
        assert status == 200, doc
        assert list(doc) == top
        (load,) = doc["loads"]
        assert list(load) == [*release["core"], "memory", "disaggregation", "queues"]
        for section in ("memory", "queues", "disaggregation"):
            assert list(load[section]) == release[section], section
        status, doc = c.json("GET", "/v1/loads?include=core")
        assert status == 200 and list(doc["loads"][0]) == release["core"]
        status, doc = c.json("GET", "/v1/loads?include=nope")
        assert status == 400 and "Invalid include sections" in doc["detail"]


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out
