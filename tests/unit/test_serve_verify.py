"""`serve verify` (sparkctl/serve/verify.py) against the SGLang stand-in on loopback.

Two real stand-in ranks (the harness of test_sglang_standin) serve the API;
the Verifier talks to them through the OpenAI client exactly as it does to a
cluster. Only the SSH side is replaced: unit states come from the processes.
Then a wrong-shaped and a non-JSON server: a failed check saying what came
back, never a traceback. Then a fake SGLang that answers every route right
except the one a case breaks (empty, truncated, an array, wrong types, a 500
page, an open endpoint, a stream of garbage, no usage, no answer at all):
that check fails saying what came back, the report fails, and no timing
figure is made from it; and `sparkctl serve verify` itself exits 1 with one
line naming the failed checks and the report written.
"""

from __future__ import annotations

import functools
import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from sparkctl.inventory import Inventory
from sparkctl.plan import SglangPlan
from sparkctl.report.model import Report
from sparkctl.serve.cluster import Cluster
from sparkctl.serve.verify import Verifier, verify
from tests.unit import plans
from tests.unit.test_sglang_standin import KEY, _up, cluster, model_dir, needs_loopback

# The sglang role's _sglang_api_key_env, as tests/unit/plans.py's plan names it.
API_KEY_ENV = "SPARKCTL_SGLANG_API_KEY"

__all__ = ["model_dir"]  # the fixture, imported for pytest

SIM = Path(__file__).resolve().parents[2] / "inventory" / "sim.ini"
# shutdown() waits for serve_forever to look at its flag, every poll_interval (0.5 s by
# default): half a second a fake server, for nothing.
QUICK_SHUTDOWN = {"poll_interval": 0.01}


@dataclass
class FakeCluster:
    """What Verifier reads from a Cluster, without SSH."""

    base_url: str
    alive: dict[str, bool]
    nodes: list[str] = field(default_factory=lambda: ["spark1", "spark2"])
    unit: str = "sparkctl-sglang.service"
    model_name: str = "toy"
    tls_ca_file: str | None = None

    @property
    def head(self) -> str:
        return self.nodes[0]

    def rank(self, node: str) -> int:
        return self.nodes.index(node)

    def sglang(self, node: str | None = None) -> SglangPlan:
        values = {"verify_requests": 2, "verify_max_tokens": 12}  # tp_size, nnodes: the nodes
        return plans.plan(self.nodes, edit=plans.sections(sglang=values)).node(self.head).sglang

    def unit_states(self) -> dict[str, dict[str, str]]:
        return {
            n: {
                "ActiveState": "active" if up else "inactive",
                "SubState": "running" if up else "dead",
            }
            for n, up in self.alive.items()
        }


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
def test_verify_speaks_https_and_checks_the_server_against_the_ca(
    tmp_path: Path, model_dir: Path
) -> None:
    """TLS on the API (sglang_tls_certfile/keyfile): verify talks https and trusts only the
    inventory's CA (sglang_tls_ca_file); another CA fails every HTTP check, saying why."""
    crt, key, other = tmp_path / "s.crt", tmp_path / "s.key", tmp_path / "other.crt"
    for cert, keyfile in ((crt, key), (other, tmp_path / "other.key")):
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
                "-keyout",
                str(keyfile),
                "-out",
                str(cert),
            ],
            capture_output=True,
            timeout=60,
            check=True,
        )
    with cluster(
        tmp_path, model_dir, 2, extra=["--ssl-certfile", str(crt), "--ssl-keyfile", str(key)]
    ) as c:
        _up(c)
        alive = {"spark1": True, "spark2": True}
        good = FakeCluster(f"https://127.0.0.1:{c.port}", alive, tls_ca_file=str(crt))
        checks = Verifier(good, KEY).run()  # type: ignore[arg-type]
        assert [(x.check, x.message) for x in checks if not x.ok] == []
        wrong = FakeCluster(f"https://127.0.0.1:{c.port}", alive, tls_ca_file=str(other))
        named = _by_name(Verifier(wrong, KEY).run())  # type: ignore[arg-type]
    for check in ("health", "server_info", "models", "chat_completion"):
        assert named[check].outcome == "failed", check
        assert (
            "CERTIFICATE_VERIFY_FAILED" in named[check].message
            or "certificate verify failed" in named[check].message.lower()
        ), named[check].message


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
    threading.Thread(target=server.serve_forever, kwargs=QUICK_SHUTDOWN, daemon=True).start()
    try:
        fake = FakeCluster(
            f"http://127.0.0.1:{server.server_address[1]}", {"spark1": True, "spark2": True}
        )
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


# ----------------------------------------------------- malformed answers
# A fake server that answers every route verify uses the way SGLang does
# (shapes from test_sglang_standin's references), unless a case replaces one
# route's answer with a malformed one. verify() then runs as the command runs it:
# a real Cluster (its head on loopback), the unit states from a fake runner.

Route = str  # health, health_generate, server_info, models, chat, chat_stream,
#              completion_stream, no_key (a POST without the Authorization header)


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: Any = b""  # bytes as they are; anything else as JSON
    content_type: str = "application/json"

    def encoded(self) -> bytes:
        return self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()


def _sse(*events: Any) -> Answer:
    """A text/event-stream body; ``[DONE]`` and other strings are sent as they are."""
    lines = [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events]
    return Answer(body="".join(lines).encode(), content_type="text/event-stream")


def _chunk(obj: str, choice: dict[str, Any] | None, usage: Any = None) -> dict[str, Any]:
    return {
        "id": "req-1",
        "object": obj,
        "created": 1,
        "model": "toy",
        "choices": [{"index": 0, "finish_reason": None, **choice}] if choice else [],
        "usage": usage,
    }


def _usage(completion: Any) -> dict[str, Any]:
    return {
        "prompt_tokens": 20,
        "completion_tokens": completion,
        "total_tokens": 20 + completion if isinstance(completion, int) else 20,
    }


def _chat_stream(body: dict[str, Any], usage: Any = "count") -> Answer:
    n = int(body.get("max_tokens") or 4)
    chunks = [_chunk("chat.completion.chunk", {"delta": {"role": "assistant", "content": ""}})]
    chunks += [
        _chunk("chat.completion.chunk", {"delta": {"content": f" tok{i}"}}) for i in range(n)
    ]
    if (body.get("stream_options") or {}).get("include_usage") and usage is not None:
        chunks.append(
            _chunk("chat.completion.chunk", None, _usage(n) if usage == "count" else usage)
        )
    return _sse(*chunks, "[DONE]")


CHAT = {
    "id": "req-1",
    "object": "chat.completion",
    "created": 1,
    "model": "toy",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "The weights."},
        }
    ],
    "usage": _usage(3),
}
UNAUTHORIZED = Answer(401, {"error": "Unauthorized"})


SGLANG: dict[Route, Answer] = {
    "health": Answer(body=b"", content_type="text/plain"),
    "health_generate": Answer(body=b"", content_type="text/plain"),
    "server_info": Answer(body={"tp_size": 2, "nnodes": 2, "version": "0.5.17"}),
    "old_server_info": Answer(body={"tp_size": 2, "nnodes": 2, "version": "0.4.6"}),
    "models": Answer(
        body={
            "object": "list",
            "data": [{"id": "toy", "object": "model", "created": 1, "owned_by": "sglang"}],
        }
    ),
    "chat": Answer(body=CHAT),
    "completion_stream": _sse(
        *(_chunk("text_completion", {"text": f" w{i}"}) for i in range(3)), "[DONE]"
    ),
}


def _sglang(route: Route, body: dict[str, Any]) -> Answer:
    """What SGLang answers to ``route`` (two ranks, model "toy")."""
    if route == "chat_stream":
        return _chat_stream(body)
    return SGLANG.get(route, UNAUTHORIZED)


class _Sglang(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    answers: dict[Route, Answer | Any] = {}  # noqa: RUF012 - a subclass per server

    def _route(self, body: dict[str, Any]) -> Route:
        path = self.path.split("?")[0]
        if self.command == "GET":
            # /server_info is the release's name; /get_server_info the deprecated one
            # (sglang 0.5.17 srt/entrypoints/http_server.py), kept by older pins.
            return {
                "/health": "health",
                "/health_generate": "health_generate",
                "/server_info": "server_info",
                "/get_server_info": "old_server_info",
                "/v1/models": "models",
            }.get(path, "?")
        if "Authorization" not in self.headers:
            return "no_key"
        kind = "chat" if path == "/v1/chat/completions" else "completion"
        return f"{kind}_stream" if body.get("stream") else kind

    def _answer(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.loads(raw) if raw else {}
        route = self._route(body)
        given = self.answers.get(route)
        answer = given(body) if callable(given) else given or _sglang(route, body)
        data = answer.encoded()
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def fake_sglang(answers: dict[Route, Any]) -> Iterator[int]:
    handler = type("Handler", (_Sglang,), {"answers": answers})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs=QUICK_SHUTDOWN, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent_server() -> Iterator[int]:
    """Accepts every connection, reads nothing, answers nothing."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with suppress(OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


def _states(host: str, command: str, timeout: int) -> tuple[int, str]:
    if command.startswith("systemctl show -p BindsTo --value"):
        # a unit bound to no firewall (sglang_firewall_enabled false): that check is
        # test_serve_firewall's, with the real nft
        return 0, "\n"
    if command.startswith("readlink -f "):  # where the model link points (model prune)
        return 0, "/models/rev1\n"
    assert command.startswith("systemctl show -p ActiveState,SubState"), command
    return 0, "ActiveState=active\nSubState=running\nResult=success\nNRestarts=0\n"


def serve_cluster(inv: Inventory, port: int, run_dir: Path) -> Cluster:
    """A Cluster as open_cluster builds it, its head's API on 127.0.0.1:``port``."""
    inv = replace(inv, nodes=tuple(replace(n, mgmt_ip="127.0.0.1") for n in inv.nodes))
    names = [n.name for n in inv.nodes]
    sglang = {
        "unit": "sparkctl-sglang.service",
        "port": port,
        "served_model_name": "toy",
        "model_path": "/models/current",
        "api_key_file": str(run_dir / "no-key-file"),
        "api_key_required": True,
        "tp_size": len(names),
        "nnodes": len(names),
        "verify_requests": 2,
        "verify_max_tokens": 6,
    }
    return plans.cluster(inv, sglang, _states, run_dir)


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(API_KEY_ENV, KEY)
    return KEY


def _verify(tmp_path: Path, port: int) -> Report:
    return verify(
        serve_cluster(plans.two_sparks(tmp_path, fabric=False), port, tmp_path / "run"),
        "2026-01-01",
    )


def test_the_fake_server_passes_every_check(tmp_path: Path, api_key: str) -> None:
    """The baseline the malformed cases depart from: every check passes, with figures."""
    with fake_sglang({}) as port:
        report = _verify(tmp_path, port)
    assert [(c.check, c.message) for c in report.failed_checks()] == []
    latency = _by_name(report.checks)["latency"]
    assert latency.outcome == "passed" and "tokens/s" in latency.message
    assert any(n.startswith("serving figures: ttft_s") for n in report.notes)


def test_server_info_falls_back_to_the_deprecated_name_only_where_it_is_missing(
    tmp_path: Path, api_key: str
) -> None:
    with fake_sglang({}) as port:
        current = _by_name(_verify(tmp_path, port).checks)["server_info"]
    assert current.outcome == "passed" and "version 0.5.17" in current.message
    with fake_sglang({"server_info": Answer(404, {"detail": "Not Found"})}) as port:
        older = _by_name(_verify(tmp_path, port).checks)["server_info"]
    assert older.outcome == "passed" and "version 0.4.6" in older.message


def test_what_server_info_returns_of_the_key_never_reaches_the_report(
    tmp_path: Path, api_key: str
) -> None:
    """The release's /server_info carries api_key and admin_api_key (its server args)."""
    answer = Answer(body=[{"tp_size": 2, "api_key": api_key, "admin_api_key": None}])
    with fake_sglang({"server_info": answer}) as port:
        report = _verify(tmp_path, port)
    info = _by_name(report.checks)["server_info"]
    assert info.outcome == "failed" and "returned list" in info.message
    assert api_key not in json.dumps(report.to_dict()) and "<redacted by sparkctl>" in info.message


def _truncated(text: str) -> Answer:
    return Answer(body=text.encode())


HTML_500 = Answer(500, b"<html><body><h1>500 Internal Server Error</h1></body></html>", "text/html")

# case: (the routes answered wrongly, {the check that must fail: what its message says})
MALFORMED: dict[str, tuple[dict[Route, Any], dict[str, str]]] = {
    "empty-body-200": (
        {"server_info": Answer(), "models": Answer(), "chat": Answer()},
        {
            "server_info": "HTTP 200, not JSON: ''",
            "models": "HTTP 200, not JSON: ''",
            "chat_completion": "HTTP 200, not JSON: ''",
        },
    ),
    "truncated-json": (
        {
            "server_info": _truncated('{"tp_size": 2, "nno'),
            "models": _truncated('{"object": "list", "data": [{"id": "to'),
            "chat": _truncated(json.dumps(CHAT)[:40]),
        },
        {
            "server_info": 'not JSON: \'{"tp_size": 2, "nno\'',
            "models": '"data": [{"id": "to',
            "chat_completion": 'not JSON: \'{"id": "req-1", "object": "chat.complet',
        },
    ),
    "json-array": (
        {
            "server_info": Answer(body=[2, 2]),
            "models": Answer(body=[{"id": "toy"}]),
            "chat": Answer(body=[CHAT]),
        },
        {
            "server_info": "/server_info returned list, not an object: '[2, 2]'",
            "models": '/v1/models returned list, not an object: \'[{"id": "toy"}]\'',
            "chat_completion": "/v1/chat/completions returned list, not an object",
        },
    ),
    "tp-size-a-string": (
        {"server_info": Answer(body={"tp_size": "2", "nnodes": 2})},
        {"server_info": "tp_size '2', nnodes 2 (want 2, 2)"},
    ),
    "tp-size-missing": (
        {"server_info": Answer(body={"nnodes": 2, "version": "0.5.4"})},
        {"server_info": "tp_size None, nnodes 2 (want 2, 2)"},
    ),
    "models-data-not-a-list": (
        {"models": Answer(body={"object": "list", "data": {"id": "toy"}})},
        {"models": '/v1/models \'data\' is dict, not a list: \'{"object": "list", "data"'},
    ),
    "models-empty": (
        {"models": Answer(body={"object": "list", "data": []})},
        {"models": "/v1/models lists [], not 'toy'"},
    ),
    "models-another-id": (
        {"models": Answer(body={"object": "list", "data": [{"id": "other", "object": "model"}]})},
        {"models": "/v1/models lists ['other'], not 'toy'"},
    ),
    "chat-no-choices": (
        {"chat": Answer(body={**CHAT, "choices": []})},
        {"chat_completion": 'no choices in the answer: \'{"id": "req-1"'},
    ),
    "chat-content-null": (
        {
            "chat": Answer(
                body={
                    **CHAT,
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": None},
                        }
                    ],
                }
            )
        },
        {"chat_completion": "0 characters, finish_reason stop"},
    ),
    "stream-lines-not-json": (
        {"completion_stream": _sse("not json at all", "{'text': 'w'}", "[DONE]")},
        {"streamed_completion": "not JSON (Expecting value): 'not json at all'"},
    ),
    "stream-ends-without-done-or-chunks": (
        {"completion_stream": Answer(body=b": keep-alive\n\n", content_type="text/event-stream")},
        {"streamed_completion": "0 chunks, 0 characters"},
    ),
    "http-500-html": (
        dict.fromkeys(
            (
                "health",
                "health_generate",
                "server_info",
                "models",
                "chat",
                "completion_stream",
                "no_key",
            ),
            HTML_500,
        ),
        {
            "health": "HTTP 500: '<html><body><h1>500 Internal Server Error",
            "health_generate": "HTTP 500",
            "server_info": "HTTP 500, not JSON: '<html>",
            "models": "HTTP 500",
            "chat_completion": "HTTP 500",
            "streamed_completion": "HTTP 500",
            "api_key": "without the key: HTTP 500 (want 401)",
        },
    ),
    "open-without-the-key": (
        {"no_key": Answer(body=CHAT)},
        {"api_key": "without the key: HTTP 200 (want 401)"},
    ),
    "health-503": (
        {"health": Answer(503, b'{"detail": "starting"}')},
        {"health": 'HTTP 503: \'{"detail": "starting"}\''},
    ),
    # the latency measurement: everything else answers correctly, so it runs
    "timed-stream-without-usage": (
        {"chat_stream": lambda body: _chat_stream(body, usage=None)},
        {"latency": "the stream sent no usage"},
    ),
    "timed-stream-negative-completion-tokens": (
        {"chat_stream": lambda body: _chat_stream(body, usage=_usage(-6))},
        {"latency": "usage.completion_tokens -6"},
    ),
    "timed-stream-more-tokens-than-asked": (
        {"chat_stream": lambda body: _chat_stream(body, usage=_usage(600))},
        {"latency": "usage.completion_tokens 600 for 6 content chunk(s) and max_tokens 6"},
    ),
    "timed-stream-lines-not-json": (
        {"chat_stream": _sse("<html>oops</html>", "[DONE]")},
        {"latency": "not JSON (Expecting value): '<html>oops</html>'"},
    ),
    "timed-stream-without-content": (
        {
            "chat_stream": _sse(
                _chunk("chat.completion.chunk", {"delta": {"content": ""}}), "[DONE]"
            )
        },
        {"latency": "produced no content"},
    ),
}


def _no_figures(report: Report) -> None:
    latency = _by_name(report.checks)["latency"]
    assert latency.outcome in ("failed", "skipped"), latency
    assert not re.search(r"tokens/s|time to first token|\d+\.\d+ s\b", latency.message), latency
    assert not any("serving figures" in n for n in report.notes), report.notes


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_answer_fails_its_check_with_what_came_back(
    tmp_path: Path, api_key: str, case: str
) -> None:
    answers, expected = MALFORMED[case]
    with fake_sglang(answers) as port:
        report = _verify(tmp_path, port)  # never raises
    assert report.verdict == "failed"
    named = _by_name(report.checks)
    for check, says in expected.items():
        assert named[check].outcome == "failed", (check, named[check].message)
        assert says in named[check].message, (check, named[check].message)
    others = {c.check for c in report.checks if not c.ok} - set(expected)
    assert others <= {"latency"}, [(c, named[c].message) for c in others]
    _no_figures(report)


def test_a_server_that_never_answers_times_out_every_check(
    tmp_path: Path, api_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # verify waits up to 30-120 s per request (httpx timeout=..., the OpenAI client's
    # timeout=120.0): a fifth of a second each here, the same code path.
    for name in ("get", "post"):
        real = getattr(httpx.Client, name)
        monkeypatch.setattr(
            httpx.Client,
            name,
            functools.partialmethod(
                lambda self, real, *a, **k: real(self, *a, **{**k, "timeout": 0.2}), real
            ),
        )
    client = openai.OpenAI
    monkeypatch.setattr(openai, "OpenAI", lambda **k: client(**{**k, "timeout": 0.2}))
    with silent_server() as port:
        report = _verify(tmp_path, port)
    named = _by_name(report.checks)
    for check in (
        "health",
        "health_generate",
        "server_info",
        "models",
        "chat_completion",
        "streamed_completion",
        "api_key",
    ):
        assert named[check].outcome == "failed", (check, named[check].message)
        assert re.search(r"[Tt]imeout|timed out", named[check].message), named[check].message
    assert report.verdict == "failed"
    _no_figures(report)


def run_verify_command(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    answers: dict[str, Answer],
    run_dir: Path,
) -> tuple[int | str | None, str, str]:
    """`sparkctl serve verify inventory/sim.ini` through the CLI against the fake SGLang
    answering ``answers``, the report in ``run_dir``: (exit code, stdout, stderr)."""
    from sparkctl import cli  # noqa: PLC0415
    from sparkctl.serve import service  # noqa: PLC0415

    code: int | str | None = 0
    with fake_sglang(answers) as port:
        monkeypatch.setattr(
            service,
            "open_cluster",
            lambda inv, command, extravars=None: serve_cluster(inv, port, run_dir),
        )
        monkeypatch.setattr(sys, "argv", ["sparkctl", "serve", "verify", str(SIM)])
        try:
            cli.main()
        except SystemExit as exc:
            code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_the_serve_verify_command_fails_in_one_line_and_keeps_the_report(
    tmp_path: Path,
    api_key: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`sparkctl serve verify INVENTORY` as typed: the real inventory check, lock, verify,
    report and exit code; only the Cluster's SSH and its endpoint are the fake's."""

    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("SPARKCTL_DEBUG", raising=False)
    run_dir = tmp_path / "run"
    answers = {
        "server_info": Answer(body={"tp_size": 4, "nnodes": 4}),
        "chat": Answer(body={**CHAT, "choices": []}),
        "no_key": Answer(body=CHAT),
    }
    code, out, err = run_verify_command(monkeypatch, capsys, answers, run_dir)
    assert code == 1, (out, err)
    failure = [line for line in err.splitlines() if "serve verify failed" in line]
    assert len(failure) == 1, err
    assert failure[0].startswith(
        "error: serve verify failed: chat_completion: ValueError: "
        'no choices in the answer: \'{"id": "req-1"'
    ), failure
    assert "; api_key: without the key: HTTP 200 (want 401)" in failure[0]
    assert "Traceback" not in out + err
    report = json.loads((run_dir / "report.json").read_text())
    assert report["verdict"] == "failed" and report["inventory"] == str(SIM)
    outcomes = {c["check"]: c["outcome"] for c in report["checks"]}
    assert outcomes == {
        "rank_running": "passed",
        "health": "passed",
        "health_generate": "passed",
        "server_info": "passed",
        "models": "passed",
        "chat_completion": "failed",
        "streamed_completion": "passed",
        "api_key": "failed",
        "latency": "skipped",
        "firewall": "skipped",
    }
    assert not any("serving figures" in n for n in report["notes"])


def test_a_passing_verify_records_each_nodes_serving_revision_for_model_prune(
    tmp_path: Path,
    api_key: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from sparkctl import model_store  # noqa: PLC0415

    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    four = {"server_info": Answer(body={"tp_size": 4, "nnodes": 4, "version": "0.5.17"})}
    code, out, err = run_verify_command(monkeypatch, capsys, four, tmp_path / "run")
    assert code in (0, None), (out, err)
    assert model_store.verified_roots("sim") == dict.fromkeys(
        ("spark1", "spark2", "spark3", "spark4"), "/models/rev1"
    )
    # a failing verify records nothing
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state2"))
    bad = {**four, "server_info": Answer(status=500, body={"error": "boom"})}
    code, out, err = run_verify_command(monkeypatch, capsys, bad, tmp_path / "run2")
    assert code == 1, (out, err)
    assert model_store.verified_roots("sim") == {}
