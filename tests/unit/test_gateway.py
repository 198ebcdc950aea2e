"""The gateway's pieces without a gateway: the role's command line and sparkctl's parser
of ``GET /workers`` on answers recorded from the real smg 1.13.0
(tests/fixtures/smg/README.md). The real gateway itself: tests/contract/test_gateway.py."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from sparkctl.serve.gateway import parse_workers
from tests.unit.pathload import load_file

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "smg"
FILTER = REPO / "ansible_collections/sparkctl/spark/plugins/filter/sglang_gateway.py"
f: Any = load_file("sglang_gateway_filter_unit", FILTER)


def recorded(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def test_workers_as_smg_lists_them_ready_not_ready_and_failed() -> None:
    for name, state in (("workers-not-ready.json", "not_ready"), ("workers-failed.json", "failed")):
        workers = parse_workers(recorded(name))  # in the gateway's order, which varies
        (ready,) = [w for w in workers if w.status == "ready"]
        (other,) = [w for w in workers if w.status != "ready"]
        assert (ready.status, ready.ready, ready.healthy) == ("ready", True, True)
        assert (other.status, other.ready, other.healthy) == (state, False, False)
        for w in (ready, other):
            assert (w.runtime, w.models) == ("sglang", ("toy",))
            assert w.url.startswith("http://127.0.0.1:") and not w.url.endswith("/")
            assert len(w.id) == 36
    assert parse_workers({"workers": [], "total": 0}) == []


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda d: d.pop("workers"), "no 'workers' list"),
        (lambda d: d["workers"].__setitem__(0, "x"), "workers[0] is not an object"),
        (lambda d: d["workers"][1].pop("status"), "workers[1] lacks ['status']"),
        (lambda d: d["workers"][0].__setitem__("url", 5), "workers[0] lacks ['url']"),
        (lambda d: d["workers"][0].__setitem__("is_healthy", "yes"), "lacks ['is_healthy']"),
        (lambda d: d["workers"][0].__setitem__("models", [{"name": "x"}]), "models is not"),
    ],
)
def test_an_answer_not_shaped_as_smgs_is_refused_naming_what(edit: Any, says: str) -> None:
    doc = copy.deepcopy(recorded("workers-failed.json"))
    edit(doc)
    with pytest.raises(ValueError, match=None) as err:
        parse_workers(doc)
    assert says in str(err.value)


def test_the_role_gives_smg_its_tuned_health_checks_and_no_key_on_the_command_line() -> None:
    args = f.sglang_gateway_args(port=30080, metrics_port=29000, api_key=True)
    pairs = dict(itertools.pairwise(args))
    assert pairs["--health-check-interval-secs"] == "30"
    assert pairs["--health-check-timeout-secs"] == "25"
    assert int(pairs["--health-check-timeout-secs"]) > f.SGLANG_HEALTH_WINDOW_S
    assert pairs["--health-failure-threshold"] == pairs["--health-success-threshold"] == "2"
    assert pairs["--health-check-endpoint"] == "/health"
    assert "--disable-tokenizer-autoload" in args and "--no-remove-unhealthy-workers" in args
    assert "--worker-urls" not in args  # sparkctl registers each head at run time
    assert args[-2:] == ["--api-key", f.API_KEY_REF]
    argv = f.sglang_gateway_exec_argv(
        args, python="/opt/sparkctl/smg/bin/python3", secrets_file="/etc/sparkctl/s.env"
    )
    split = argv.index("--")
    assert argv[:split] == [
        "/opt/sparkctl/smg/bin/python3",
        "/usr/local/lib/sparkctl/sglang-launcher.py",
        "--secrets-file",
        "/etc/sparkctl/s.env",
        "--module",
        "smg.launch_router",
    ]
    assert argv[split + 1 :] == args[:-2]
    without = f.sglang_gateway_exec_argv(args[:-2], python="/p")
    assert "--secrets-file" not in without and without[2:4] == ["--module", "smg.launch_router"]


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"policy": "fastest"}, "not one of smg's policies"),
        ({"port": 0}, "sglang_gateway_port 0 is outside 1..65535"),
        ({"port": True}, "must be an integer"),
        ({"health": {"interval": 30}}, "has no setting ['interval']"),
        ({"health": {"timeout_secs": "soon"}}, "must be an integer, got 'soon'"),
        ({"health": {"endpoint": "/health generate"}}, "is not a URL path"),
        ({"extra_args": "--x 1"}, "a list, one word per item"),
        ({"extra_args": ["--x", None]}, "every item is one word"),
        ({"extra_args": ["--log-dir", "/var/log/a b"]}, "one word per list item"),
        ({"extra_args": ["--x", "1\nExecStartPre=/bin/id"]}, "one word per list item"),
    ],
)
def test_the_filter_refuses_what_the_unit_cannot_hold(kwargs: dict[str, Any], says: str) -> None:
    base: dict[str, Any] = {"port": 30080, "metrics_port": 29000}
    with pytest.raises(f.AnsibleFilterError) as err:
        f.sglang_gateway_args(**{**base, **kwargs})
    assert says in str(err.value)
