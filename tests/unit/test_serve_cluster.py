"""Where serve finds the API key, and how the endpoint and sudo are derived (serve/cluster.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.inventory import Inventory, Node
from sparkctl.serve.cluster import Cluster
from tests.unit import plans

# The sglang role's _sglang_api_key_env, as tests/unit/plans.py's plan names it.
API_KEY_ENV = "SPARKCTL_SGLANG_API_KEY"


def _cluster(tmp_path: Path, *, required: bool = True, user: str = "root") -> Cluster:
    sglang: dict[str, Any] = {
        "unit": "sparkctl-sglang.service",
        "port": 30000,
        "served_model_name": "",
        "model_path": "/models/current",
        "api_key_file": str(tmp_path / "key"),
        "api_key_required": required,
    }
    return plans.cluster(
        plans.two_sparks(tmp_path, user=user), sglang, lambda host, cmd, timeout: (0, ""), tmp_path
    )


def test_the_environment_wins_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "key").write_text("from-file\n")
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    assert _cluster(tmp_path).api_key() == "from-env"


def test_the_environment_variable_is_the_one_the_plan_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The role decides where its default key comes from (_sglang_api_key_env); serve
    reads the variable the plan names, not a name of its own."""
    (tmp_path / "key").write_text("from-file\n")
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    monkeypatch.setenv("OTHER_SGLANG_API_KEY", "from-other")
    inv = plans.two_sparks(tmp_path)
    sglang = {"api_key_file": str(tmp_path / "key"), "api_key_env": "OTHER_SGLANG_API_KEY"}
    c = plans.cluster(inv, sglang, lambda host, cmd, timeout: (0, ""), tmp_path)
    assert c.api_key() == "from-other"
    monkeypatch.delenv("OTHER_SGLANG_API_KEY")
    c = plans.cluster(inv, sglang, lambda host, cmd, timeout: (0, ""), tmp_path)
    assert c.api_key() == "from-file"


def test_the_file_is_read_without_ansibles_salt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    (tmp_path / "key").write_text("Abc123 salt=xyz\n")
    assert _cluster(tmp_path).api_key() == "Abc123"


def test_a_missing_key_is_bad_input_when_required(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    with pytest.raises(SparkctlError) as err:
        _cluster(tmp_path).api_key()
    assert err.value.code == ExitCode.BAD_INPUT and API_KEY_ENV in err.value.message
    assert _cluster(tmp_path, required=False).api_key() is None


def test_endpoint_model_name_and_sudo(tmp_path: Path) -> None:
    c = _cluster(tmp_path)
    assert c.base_url == "http://10.77.0.11:30000"
    assert c.model_name == "/models/current"
    assert c.head == "spark1" and c.workers == ["spark2"]
    assert c.sudo("spark1") == ""
    assert _cluster(tmp_path, user="admin").sudo("spark2") == "sudo -n "


def test_two_groups_have_their_own_heads_ranks_and_endpoints(tmp_path: Path) -> None:
    c = _cluster(tmp_path)
    nodes = [f"spark{i}" for i in range(1, 5)]
    c.inv = Inventory(
        path=tmp_path / "x.ini",
        cluster="sim",
        switch=None,
        ports=(),
        nodes=tuple(Node(n, i, f"10.77.0.{11 + i}", {}) for i, n in enumerate(nodes)),
        hostvars={n: {} for n in nodes},
    )
    base = plans.plan_dict(["spark1", "spark2"])["hosts"]["spark1"]["sglang"]
    base.update(dataclasses.asdict(c.plan.node("spark1").sglang))  # this cluster's endpoint
    members = {"a": ["spark1", "spark2"], "b": ["spark3", "spark4"]}

    def group(node: str, part: dict[str, Any]) -> None:
        i = nodes.index(node)
        part["sglang"] = {
            **base,
            "group": "ab"[i // 2],
            "group_members": members["ab"[i // 2]],
            "group_head": members["ab"[i // 2]][0],
            "group_rank": i % 2,
        }

    c.plan = plans.plan(nodes, edit=group)
    groups = c.groups()
    assert [(g.name, g.head, g.workers) for g in groups] == [
        ("a", "spark1", ["spark2"]),
        ("b", "spark3", ["spark4"]),
    ]
    assert c.heads == ["spark1", "spark3"] and c.workers == ["spark2", "spark4"]
    assert [g.base_url for g in groups] == ["http://10.77.0.11:30000", "http://10.77.0.13:30000"]
    assert c.rank("spark4") == 1 and c.label("spark4") == "group b rank 1 (spark4)"


def test_one_group_when_the_plan_has_none(tmp_path: Path) -> None:
    c = _cluster(tmp_path)

    def before_groups(_node: str, part: dict[str, Any]) -> None:
        for key in ("group", "group_head", "group_rank", "group_members"):
            del part["sglang"][key]

    c.plan = plans.plan(c.nodes, edit=before_groups)
    assert [(g.name, g.members) for g in c.groups()] == [("main", ["spark1", "spark2"])]
    assert c.label("spark2") == "rank 1 (spark2)"


def test_log_lines_lose_the_api_key_and_the_hf_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghij0123")
    (tmp_path / "key").write_text("Key0123456789abcdef salt=xyz\n")
    cluster = _cluster(tmp_path)
    line = (
        "server_args=ServerArgs(model_path='/m', api_key='Key0123456789abcdef', "
        "hf='hf_abcdefghij0123')"
    )
    assert cluster.redact(line) == (
        "server_args=ServerArgs(model_path='/m', "
        "api_key='<redacted by sparkctl>', "
        "hf='<redacted by sparkctl>')"
    )
    # without a key file (and not required) there is nothing to hide but the token
    monkeypatch.delenv("HF_TOKEN")
    assert _cluster(tmp_path / "none", required=False).redact("plain line") == "plain line"


def test_the_key_follows_ansibles_precedence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """-e, then the inventory (vault values arrive decrypted), then env, then the file."""
    (tmp_path / "key").write_text("from-file\n")
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    cluster = _cluster(tmp_path)
    assert cluster.api_key() == "from-env"
    cluster.inv.hostvars["spark1"]["sglang_api_key"] = "from-inventory"  # type: ignore[index]
    assert cluster.api_key() == "from-inventory"
    cluster.extravars = {"sglang_api_key": "from-extra-vars"}
    assert cluster.api_key() == "from-extra-vars"
