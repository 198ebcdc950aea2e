"""`serve verify` (sparkctl/serve/verify.py) against the SGLang stand-in on loopback.

Two real stand-in ranks (the harness of test_sglang_standin) serve the API;
the Verifier talks to them through the OpenAI client exactly as it does to a
cluster. Only the SSH side is replaced: unit states come from the processes.
Then a wrong-shaped and a non-JSON server: a failed check saying what came
back, never a traceback.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sparkctl.serve.verify import Verifier
from tests.unit.test_sglang_standin import KEY, _up, cluster, model_dir, needs_loopback

__all__ = ["model_dir"]  # the fixture, imported for pytest


@dataclass
class FakeCluster:
    """What Verifier reads from a Cluster, without SSH."""

    base_url: str
    alive: dict[str, bool]
    nodes: list[str] = field(default_factory=lambda: ["spark1", "spark2"])
    unit: str = "sparkctl-sglang.service"
    model_name: str = "toy"

    @property
    def head(self) -> str:
        return self.nodes[0]

    def rank(self, node: str) -> int:
        return self.nodes.index(node)

    def sglang(self, node: str | None = None) -> dict[str, Any]:
        return {"tp_size": len(self.nodes), "nnodes": len(self.nodes), "verify_requests": 2,
                "verify_max_tokens": 12}

    def unit_states(self) -> dict[str, dict[str, str]]:
        return {n: {"ActiveState": "active" if up else "inactive",
                    "SubState": "running" if up else "dead"} for n, up in self.alive.items()}


def _by_name(checks: list[Any]) -> dict[str, Any]:
    return {c.check: c for c in checks if c.check != "rank_running"}


@needs_loopback
def test_a_healthy_group_passes_every_check(tmp_path: Path, model_dir: Path) -> None:
    with cluster(tmp_path, model_dir, 2) as c:
        _up(c)
        fake = FakeCluster(f"http://127.0.0.1:{c.port}", {"spark1": True, "spark2": True})
        v = Verifier(fake, KEY)  # type: ignore[arg-type]
        checks = v.run()
    failed = [(x.check, x.message) for x in checks if not x.ok]
    assert not failed
    named = _by_name(checks)
    assert named["server_info"].message.startswith("tp_size 2, nnodes 2")
    assert named["api_key"].message == "without the key: HTTP 401"
    assert int(named["streamed_completion"].message.split()[0]) >= 2  # chunks, streamed
    assert v.figures["ttft_s"] > 0 and v.figures["decode_tokens_per_s"] > 0
    assert v.figures["e2e_s"] >= v.figures["ttft_s"]


@needs_loopback
def test_a_dead_rank_is_named_and_health_fails(tmp_path: Path, model_dir: Path) -> None:
    with cluster(tmp_path, model_dir, 2) as c:
        _up(c)
        c.procs[1].kill()
        c.procs[1].wait(timeout=10)
        fake = FakeCluster(f"http://127.0.0.1:{c.port}", {"spark1": True, "spark2": False})
        checks = Verifier(fake, KEY).run()  # type: ignore[arg-type]
    bad = {(x.check, x.host, x.subject) for x in checks if not x.ok}
    assert ("rank_running", "spark2", "rank 1") in bad
    assert ("health", "spark1", None) in bad
    latency = _by_name(checks)["latency"]
    assert latency.outcome == "skipped"


class _Odd(BaseHTTPRequestHandler):
    mode = "shape"

    def do_GET(self) -> None:
        body: bytes
        if self.path.startswith("/health"):
            body = b""
        elif self.mode == "html":
            body = b"<html>502 Bad Gateway</html>"
        else:
            body = json.dumps({"tp": "four", "data": "nope"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("mode", ["shape", "html"])
def test_wrong_shaped_or_non_json_answers_fail_cleanly(mode: str) -> None:
    handler = type("Handler", (_Odd,), {"mode": mode})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        fake = FakeCluster(f"http://127.0.0.1:{server.server_address[1]}",
                           {"spark1": True, "spark2": True})
        checks = Verifier(fake, KEY).run()  # type: ignore[arg-type]
    finally:
        server.shutdown()
    named = _by_name(checks)
    for name in ("server_info", "models", "chat_completion"):
        assert named[name].outcome == "failed", (name, named[name].message)
        assert named[name].message  # says what came back
    if mode == "html":
        assert "not JSON" in named["server_info"].message
    else:
        assert "tp_size None, nnodes None" in named["server_info"].message
