"""One secret rule for every hiding place: a secret's name in an env map, a secret flag
in an argument list, a Jinja literal, a list or a mapping under a secret name, a URL's
password, a token's shape; refused before contact and never shown."""

from __future__ import annotations

from typing import Any

import pytest

from sparkctl.rules import common, connection, secrets

SENTINEL = "hf_secretsSentinel0123456789abcdefghijkl"


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "SGLANG_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "db_passwd",
        "CLIENT_SECRET",
        "ansible_ssh_pass",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "sglang_api_key",
        "model_cache_hf_token",
        "ssl-keyfile-password",
    ],
)
def test_secret_names(name: str) -> None:
    assert common.is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "NCCL_DEBUG",
        "sglang_verify_max_tokens",
        "sglang_tls_keyfile",
        "sglang_api_key_file",
        "sglang_api_key_required",
        "base_cluster_key_dir",
        "sglang_secrets_file",
        "KEYBOARD",
        "BYPASS",
    ],
)
def test_not_secret_names(name: str) -> None:
    assert not common.is_secret_name(name)


def _check(hv: dict[str, Any]) -> list[str]:
    hostvars = {"spark1": hv, "spark2": {}}
    problems = secrets.check_secrets(list(hostvars), hostvars)
    text = [str(p) + (p.hint or "") for p in problems]
    for line in text:
        assert SENTINEL not in line and "sentinel-value" not in line, line
    return text


@pytest.mark.parametrize(
    ("var", "value", "says"),
    [
        ("sglang_env_extra", {"HF_TOKEN": "sentinel-value"}, "HF_TOKEN: a secret's name in an env"),
        ("nccl_env_extra", {"X_PASSWORD": "sentinel-value"}, "X_PASSWORD: a secret's name"),
        ("nccl_env_overrides", {"A": {"MY_KEY": "sentinel-value"}}, "A.MY_KEY: a secret's name"),
        (
            "sglang_extra_args",
            ["--ssl-keyfile-password", "sentinel-value"],
            "item 0: --ssl-keyfile-password would put a secret on the command line",
        ),
        (
            "sglang_extra_args",
            ["--api-k=sentinel-value"],
            "item 0: --api-k would put a secret on the command line",
        ),
        (
            "sglang_extra_args",
            ["--admin-api-key", "sentinel-value"],
            "item 0: --admin-api-key would put a secret on the command line",
        ),
        (
            "sglang_container_extra_args",
            ["--env=SGLANG_API_KEY=sentinel-value"],
            "item 0: --env SGLANG_API_KEY=... would put a secret on the command line",
        ),
        (
            "sglang_container_extra_args",
            ["--gpus=all", "-e", "X_TOKEN=sentinel-value"],
            "item 1: -e X_TOKEN=... would put a secret on the command line",
        ),
        (
            "sglang_container_extra_args",
            ["-eHF_TOKEN=sentinel-value"],
            "item 0: -e HF_TOKEN=... would put a secret on the command line",
        ),
        (
            "sglang_pip_extra_args",
            "--extra-index-url https://u:sentinel-value@pypi.example/simple",
            "has a URL with a password in it",
        ),
        ("sglang_served_model_name", SENTINEL, "has an access token in it"),
        ("sglang_env_extra", {"NOTE": SENTINEL}, "has an access token in it"),
    ],
)
def test_secrets_outside_the_secret_variables_are_refused(var: str, value: Any, says: str) -> None:
    (problem,) = _check({var: value})
    assert problem.startswith(f"host spark1: variable {var}: "), problem
    assert says in problem, problem
    assert "sglang_api_key" in problem  # the hint: where secrets go instead


def test_ordinary_env_maps_and_arguments_pass() -> None:
    assert (
        _check(
            {
                "sglang_env_extra": {"NCCL_DEBUG": "INFO", "HF_HUB_OFFLINE": "1"},
                "nccl_env_overrides": {"NCCL_IB_HCA": "rocep1s0f1"},
                "sglang_extra_args": ["--mem-fraction-static", "0.8", "--api-keyless"],
                "sglang_container_extra_args": ["--shm-size=16g", "-e", "NCCL_DEBUG=INFO"],
                "sglang_pip_extra_args": "--extra-index-url https://download.pytorch.org/whl/cu130",
                "ansible_ssh_common_args": "-o ProxyJump=admin@10.0.0.1:2222",
                "ansible_facts": {"env": {"HF_TOKEN": SENTINEL}},  # facts: not the inventory's
            }
        )
        == []
    )


def test_a_group_vars_secret_is_reported_once() -> None:
    hostvars = {h: {"sglang_env_extra": {"HF_TOKEN": "x"}} for h in ("spark1", "spark2")}
    (problem,) = secrets.check_secrets(list(hostvars), hostvars)
    assert problem.host is None


def test_the_connection_rules_run_it_on_every_host() -> None:
    """check_connection (which check_topology runs) carries the secret rule."""
    hostvars = {"spark1": {}, "spark2": {"sglang_env_extra": {"HF_TOKEN": "x"}}}
    (problem,) = connection.check_connection(list(hostvars), hostvars)
    assert (problem.host, problem.var) == ("spark2", "sglang_env_extra")


# ------------------------------------------------------------ plaintext secrets
@pytest.fixture
def from_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """Values as Ansible read them from an inventory file (plaintext_secret needs that)."""
    monkeypatch.setattr(secrets, "origin_of", lambda value: "/inv/group_vars/x.yml:1:1")


@pytest.mark.usefixtures("from_a_file")
@pytest.mark.parametrize(
    "value",
    [
        SENTINEL,
        "{{ 'hf_abcdefghijklmnop' }}",
        '{{ "hf_" ~ "abcdefghijklmnop" }}',
        "{{ 'aGZfYWJj' | b64decode }}",
        "{{ lookup('ansible.builtin.env', 'HF_TOKEN') | default('hf_fallbackvalue') }}",
        "{{ lookup('ansible.builtin.env', 'HF_TOKEN', default='hf_fallbackvalue') }}",
        "hf_{{ suffix }}",
        "{% set t = 'hf_abc' %}{{ t }}",
        "{{ unclosed",
        ["hf_one", "hf_two"],
        {"primary": "hf_one"},
        [{"nested": ["hf_deep"]}],
        123456789012,
    ],
)
def test_plaintext_in_every_form_and_type(value: Any) -> None:
    assert secrets.plaintext_secret("model_cache_hf_token", value)


@pytest.mark.usefixtures("from_a_file")
@pytest.mark.parametrize(
    "value",
    [
        "{{ lookup('ansible.builtin.env', 'HF_TOKEN') }}",
        "{{ lookup('ansible.builtin.env', 'HF_TOKEN', default='') }}",
        "{{ query('ansible.builtin.env', 'HF_TOKEN') | first }}",
        "{{ vault_hf_token }}",
        "",
        None,
        [],
        {},
    ],
)
def test_references_and_empty_values_are_not_plaintext(value: Any) -> None:
    assert not secrets.plaintext_secret("model_cache_hf_token", value)


def test_a_value_from_the_command_line_is_not_an_inventory_file_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(secrets, "origin_of", lambda value: "<CLI option '-e'>")
    assert not secrets.plaintext_secret("model_cache_hf_token", ["hf_one"])


def test_the_problem_never_shows_the_value() -> None:
    problem = secrets.secret_problem("spark1", "model_cache_hf_token")
    assert "not shown" in problem.message


def test_an_inventory_s_own_ansible_facts_does_not_hide_a_token() -> None:
    hv = {"ansible_facts": {"sglang_served_model_name": 1}, "sglang_served_model_name": SENTINEL}
    (problem,) = _check(hv)
    assert "variable sglang_served_model_name: has an access token" in problem
