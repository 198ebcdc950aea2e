"""Hardening switches need an explicit opt-in: each is refused unless
``preflight_accepted_risks`` lists it, and every accepted one is said."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.rules import risks

ROOT = Path(__file__).resolve().parents[2]
GROUPS = {"sparks": ["spark1", "spark2"], "switches": []}


@pytest.fixture(autouse=True)
def _no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)


def _check(hv: dict[str, Any], other: dict[str, Any] | None = None) -> list[str]:
    hostvars = {"spark1": hv, "spark2": other or {}}
    return [str(p) for p in risks.check_risks(GROUPS, hostvars)]


CASES = [
    ("sglang_as_root", "sglang_user", {"sglang_user": ""}, "sglang_user ''"),
    ("sglang_as_root", "sglang_user", {"sglang_user": "root"}, "sglang_user 'root'"),
    (
        "sglang_as_root",
        "sglang_container_extra_args",
        {"sglang_container_extra_args": ["--user=0:0"]},
        "--user 0:0",
    ),
    ("loader_env", "sglang_env_extra", {"sglang_env_extra": {"LD_PRELOAD": "/x.so"}}, "LD_PRELOAD"),
    (
        "loader_env",
        "nccl_env_extra",
        {"nccl_env_extra": {"LD_LIBRARY_PATH": "/opt/x"}},
        "LD_LIBRARY_PATH",
    ),
    ("loader_env", "sglang_env_extra", {"sglang_env_extra": {"PYTHONPATH": "/tmp"}}, "PYTHONPATH"),
    (
        "loader_env",
        "nccl_env_overrides",
        {"nccl_env_overrides": {"NCCL_NET_PLUGIN": "/tmp/p.so"}},
        "NCCL_NET_PLUGIN",
    ),
    (
        "loader_env",
        "sglang_container_extra_args",
        {"sglang_container_extra_args": ["-e", "PYTHONSTARTUP=/x.py"]},
        "-e PYTHONSTARTUP",
    ),
    (
        "plain_http",
        "model_cache_hf_endpoint",
        {"model_cache_hf_endpoint": "http://hub.example", "model_cache_hf_token": "hf_x"},
        "http:// with a Hugging Face token",
    ),
    (
        "plain_http",
        "sglang_pip_extra_args",
        {"sglang_pip_extra_args": "--extra-index-url http://pypi.example/simple"},
        "--extra-index-url http://",
    ),
    (
        "plain_http",
        "sglang_pip_extra_args",
        {"sglang_pip_extra_args": "--trusted-host pypi.example"},
        "--trusted-host",
    ),
    (
        "container_host_root",
        "sglang_container_extra_args",
        {"sglang_container_extra_args": ["--privileged"]},
        "--privileged",
    ),
    (
        "container_host_root",
        "sglang_container_extra_args",
        {"sglang_container_extra_args": ["--pid=host"]},
        "--pid=host",
    ),
    (
        "container_host_root",
        "sglang_container_extra_args",
        {"sglang_container_extra_args": ["--cap-add", "sys_admin"]},
        "--cap-add=sys_admin",
    ),
    (
        "container_host_root",
        "sglang_container_extra_args",
        {"sglang_container_extra_args": ["--cap-add=CAP_SYS_PTRACE,NET_RAW"]},
        "--cap-add=CAP_SYS_PTRACE,NET_RAW",
    ),
    (
        "container_host_root",
        "sglang_container_extra_args",
        {"sglang_container_extra_args": ["--security-opt", "seccomp=unconfined"]},
        "--security-opt=seccomp=unconfined",
    ),
    (
        "container_host_root",
        "sglang_container_extra_args",
        {"sglang_container_extra_args": ["--device=/dev/mem"]},
        "--device=/dev/mem",
    ),
    (
        "container_host_root",
        "sglang_container_extra_args",
        {"sglang_container_extra_args": ["-v", "/:/host:ro"]},
        "-v /",
    ),
    (
        "container_host_root",
        "sglang_container_extra_args",
        {"sglang_container_extra_args": ["--volume=/etc/:/h"]},
        "--volume /etc/",
    ),
    (
        "container_host_root",
        "sglang_container_extra_args",
        {"sglang_container_extra_args": ["-v/root/.ssh:/k"]},
        "-v /root/.ssh",
    ),
    (
        "container_host_root",
        "sglang_container_extra_args",
        {"sglang_container_extra_args": ["-v", "/var/run/docker.sock:/var/run/docker.sock"]},
        "-v /var/run/docker.sock",
    ),
    (
        "container_host_root",
        "sglang_container_extra_args",
        {"sglang_container_extra_args": ["--mount", "type=bind,src=/,dst=/h"]},
        "--mount /",
    ),
    ("container_host_root", "sglang_model_mounts", {"sglang_model_mounts": ["/etc"]}, "/etc"),
]


@pytest.mark.parametrize(("risk", "var", "hv", "what"), CASES, ids=[c[3] for c in CASES])
def test_each_switch_is_refused_then_accepted(
    risk: str, var: str, hv: dict[str, Any], what: str
) -> None:
    (problem,) = _check(hv)
    assert problem.startswith(f"host spark1: variable {var}: {what}: "), problem
    assert f"refused unless preflight_accepted_risks lists {risk}" in problem
    assert _check({**hv, "preflight_accepted_risks": [risk]}) == []
    # another risk accepted is not this one
    other = next(r for r in risks.RISKS if r != risk)
    assert len(_check({**hv, "preflight_accepted_risks": [other]})) == 1
    (line,) = risks.accepted_risks({"spark1": {**hv, "preflight_accepted_risks": [risk]}})
    assert line.startswith(f"accepted risk {risk} (") and what in line, line


@pytest.mark.parametrize(
    "hv",
    [
        {"sglang_user": "sparkctl-sglang"},
        {"sglang_env_extra": {"NCCL_DEBUG": "INFO", "HF_HUB_OFFLINE": "1"}},
        {"model_cache_hf_endpoint": "http://hub.example"},  # no token to send
        {"model_cache_hf_endpoint": "https://hub.example", "model_cache_hf_token": "hf_x"},
        {"sglang_pip_extra_args": "--extra-index-url https://download.pytorch.org/whl/cu130"},
        {
            "sglang_container_extra_args": [
                "--shm-size=16g",
                "--ipc=host",
                "--network=host",
                "--gpus=all",
                "--cap-add=IPC_LOCK",
                "-v",
                "/dev/shm:/dev/shm",
                "--volume=/var/lib/sparkctl/models:/models:ro",
                "--device=/dev/infiniband/uverbs0",
                "-e",
                "NCCL_DEBUG=INFO",
            ]
        },
        {"sglang_model_mounts": ["/var/lib/sparkctl/models", "/data/models"]},
    ],
)
def test_ordinary_settings_are_no_risk(hv: dict[str, Any]) -> None:
    assert _check(hv) == []


def test_the_controller_s_token_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The role's default token is HF_TOKEN of the controller's environment."""
    hv = {"model_cache_hf_endpoint": "http://hub.example"}
    assert _check(hv) == []
    monkeypatch.setenv("HF_TOKEN", "hf_fromTheEnvironment")
    assert len(_check(hv)) == 1
    assert _check({**hv, "model_cache_hf_token": ""}) == []  # the inventory's own says none


def test_a_group_vars_switch_is_reported_once() -> None:
    hv = {"sglang_user": "root"}
    (problem,) = risks.check_risks(GROUPS, {"spark1": hv, "spark2": dict(hv)})
    assert problem.host is None and problem.var == "sglang_user"


def test_an_unknown_risk_is_refused_with_the_near_miss() -> None:
    (problem,) = risks.check_risks(GROUPS, {"spark1": {"preflight_accepted_risks": ["plain-http"]}})
    assert problem.var == "preflight_accepted_risks" and "is not a risk" in problem.message
    assert problem.hint == "did you mean plain_http?"


def test_accepted_but_unused_is_said_too() -> None:
    hostvars = {h: {"preflight_accepted_risks": ["loader_env"]} for h in ("spark1", "spark2")}
    assert risks.accepted_risks(hostvars) == [
        "accepted risk loader_env (an environment variable loads code into the server or "
        "NCCL) on all hosts: listed, not in use"
    ]
    assert risks.accepted_risks({"spark1": {}}) == []


def test_the_preflight_role_declares_the_same_choices() -> None:
    spec = yaml.safe_load(
        (
            ROOT / "ansible_collections/sparkctl/spark/roles/preflight/meta/argument_specs.yml"
        ).read_text()
    )
    option = spec["argument_specs"]["main"]["options"][risks.RISKS_VAR]
    assert option["type"] == "list" and option["elements"] == "str"
    assert option["choices"] == list(risks.RISKS)
    defaults = yaml.safe_load(
        (ROOT / "ansible_collections/sparkctl/spark/roles/preflight/defaults/main.yml").read_text()
    )
    assert defaults[risks.RISKS_VAR] == []
