"""serve's one HTTP client (sparkctl/serve/probe.py) and what serve up does with its answer.

A real HTTP server on loopback answers /health; the controller's environment
points every proxy variable at a closed port (with a user and password in the
URL). The probe must reach the server anyway, and never print the password.
Then `sparkctl serve up` as typed (the real inventory check, lock and CLI; only
the Cluster's SSH is a function answering the commands, as in
test_serve_verify.py): a cluster whose ranks all run is found serving, or, when
its head does not answer, is left running with the reasons named.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkctl.errors import ExitCode
from sparkctl.inventory import Inventory
from sparkctl.serve import probe, up
from sparkctl.serve.cluster import Cluster
from sparkctl.serve.startup import reader as logs
from tests.unit import plans
from tests.unit.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "inventory" / "sim.ini"
READY_LOG = ROOT / "tests" / "fixtures" / "sglang" / "clean_ready_sglang32255.log"
PASSWORD = "s3cret-proxy-pass"  # noqa: S105 - a sentinel that must never be printed
PROXY_NAMES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY", "all_proxy")


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
    ).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def dead_proxy(monkeypatch: pytest.MonkeyPatch) -> str:
    """Every proxy variable at a closed port, credentials in the URL, no NO_PROXY."""
    url = f"http://proxyuser:{PASSWORD}@127.0.0.1:{free_port()}"
    for name in PROXY_NAMES:
        monkeypatch.setenv(name, url)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    return url


def test_a_proxy_at_a_dead_port_does_not_reach_the_probe(
    health_server: int, dead_proxy: str
) -> None:
    base = f"http://127.0.0.1:{health_server}"
    # The environment is really poisoned: a client that trusts it goes to the dead proxy
    # (what serve up's bare httpx.get did).
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{base}/health", timeout=5.0)
    answer = probe.health(base)
    assert answer.status == 200 and answer.ok, answer
    with probe.client(None, 10.0) as http:  # verify's requests go through the same client
        assert http.get(f"{base}/health").status_code == 200


def test_no_answer_says_why_without_a_traceback() -> None:
    answer = probe.health(f"http://127.0.0.1:{free_port()}", seconds=5.0)
    assert answer.status is None and not answer.ok
    assert answer.error.startswith("ConnectError"), answer.error
    assert str(answer).startswith("GET http://127.0.0.1:") and "/health: ConnectError" in str(
        answer
    )


def test_the_hints_name_the_proxy_variables_never_their_values(dead_proxy: str) -> None:
    assert probe.proxy_variables() == sorted(PROXY_NAMES)
    assert probe.proxy_variables({"no_proxy": "x", "NO_PROXY": "y", "ftp_proxy": ""}) == []
    hints = probe.reach_hints("http://127.0.0.1:30000", ["10.77.0.0/24"])
    text = "\n".join(hints)
    assert "ALL_PROXY, HTTPS_PROXY, HTTP_PROXY, all_proxy, http_proxy are set" in text
    assert "NO_PROXY lists 127.0.0.1" in text
    assert PASSWORD not in text and "proxyuser" not in text


def test_the_hints_compare_the_controllers_address_with_the_allowed_cidrs() -> None:
    # Toward 127.0.0.1 the kernel picks 127.0.0.1 as the source: outside 10.77.0.0/24.
    (outside,) = probe.reach_hints("http://127.0.0.1:30000", ["10.77.0.0/24"], environ={})
    assert outside.startswith("this controller's address toward 127.0.0.1 is 127.0.0.1, outside")
    assert "sglang_api_allowed_cidrs (10.77.0.0/24)" in outside
    (inside,) = probe.reach_hints("http://127.0.0.1:30000", ["127.0.0.0/8"], environ={})
    assert "127.0.0.1, inside sglang_api_allowed_cidrs (127.0.0.0/8)" in inside
    assert probe.allowed("10.77.0.9", ["10.77.0.0/24"]) is True
    assert probe.allowed("not-an-address", ["10.77.0.0/24"]) is None


def test_the_ready_line_serve_up_looks_for_is_the_catalogues_ready_marker() -> None:
    (line,) = [ln for ln in READY_LOG.read_text().splitlines() if up.READY_LINE in ln]
    assert logs.phase_of(line) is logs.Phase.READY


# ------------------------------------------------------- `sparkctl serve up` as typed
class Nodes:
    """The ranks' side of SSH: every unit active/running, the head's journal of this
    invocation the real ready log, and every command that would change a unit kept."""

    def __init__(self) -> None:
        self.changes: list[str] = []

    def __call__(self, host: str, command: str, timeout: int) -> tuple[int, str]:
        if "systemctl restart" in command or "systemctl stop" in command:
            self.changes.append(f"{host}: {command}")
            return 0, ""
        if command.startswith("systemctl show -p ActiveState,SubState"):
            return 0, "ActiveState=active\nSubState=running\nResult=success\nNRestarts=0\n"
        if "InvocationID" in command and "journalctl" in command:
            return 0, READY_LOG.read_text()
        return 1, f"not answered here: {command}"


def _serve_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, port: int, nodes: Nodes
) -> int | str | None:
    from sparkctl import cli  # noqa: PLC0415

    def cluster(inv: Inventory, command: str, extravars: Any = None) -> Cluster:
        local = replace(inv, nodes=tuple(replace(n, mgmt_ip="127.0.0.1") for n in inv.nodes))
        run_dir = tmp_path / "run"
        run_dir.mkdir(exist_ok=True)
        sglang = {"port": port, "api_allowed_cidrs": ["10.77.0.0/24"]}
        return plans.cluster(local, sglang, nodes, run_dir)

    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("SPARKCTL_DEBUG", raising=False)
    monkeypatch.setattr(up, "open_cluster", cluster)
    monkeypatch.setattr(sys, "argv", ["sparkctl", "serve", "up", str(SIM)])
    code: int | str | None = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = exc.code
    return code


def test_serve_up_behind_a_dead_proxy_finds_the_cluster_serving(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    health_server: int,
    dead_proxy: str,
) -> None:
    nodes = Nodes()
    code = _serve_up(monkeypatch, tmp_path, health_server, nodes)
    out, err = capsys.readouterr()
    assert code in (0, None), (out, err)
    assert "already serving" in out
    assert nodes.changes == []


def test_serve_up_that_cannot_reach_a_ready_head_restarts_nothing_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    dead_proxy: str,
) -> None:
    nodes = Nodes()
    code = _serve_up(monkeypatch, tmp_path, free_port(), nodes)
    out, err = capsys.readouterr()
    assert code == ExitCode.UNREACHABLE, (out, err)
    assert nodes.changes == []  # no rank restarted, none stopped
    assert "every rank's unit is running, but this controller cannot reach" in err
    assert "nothing was restarted or stopped" in err
    assert "its journal says the server is fired up and ready" in err
    assert "HTTP_PROXY" in err and "sglang_api_allowed_cidrs (10.77.0.0/24)" in err
    assert "is 127.0.0.1, outside" in err
    assert PASSWORD not in out + err and "Traceback" not in out + err
