"""roles/cluster_defaults: what it resolves for a host, and what its argument spec refuses.

The role has no tasks of its own; converge.yml writes what it resolved to
/etc/sparkctl-molecule/cluster_defaults.json on each host: the values its
defaults compute (cluster_hw from hw_profile, cluster_name from the groups,
sparkctl_state_dir from the environment). Each test is one case per host (or
per refused value).
"""

# testinfra tests assert; pyproject's per-file-ignores cover tests/** only.
# ruff: noqa: S101

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from verify_helpers import SPARKS, converge_check, failed_task, podman, role_yaml

PROFILES = role_yaml("vars")["_cluster_defaults_hw_profiles"]
testinfra_hosts = [podman(name) for name in SPARKS]
RECORD = "/etc/sparkctl-molecule/cluster_defaults.json"


def recorded(host: Any) -> dict[str, Any]:
    return dict(json.loads(host.file(RECORD).content_string))


def test_cluster_hw_is_the_profile_of_hw_profile(host: Any) -> None:
    record = recorded(host)
    assert record["hw_profile"] == "sim"
    assert record["cluster_hw"] == PROFILES["sim"]


def test_cluster_name_is_the_cluster_group(host: Any) -> None:
    assert recorded(host)["cluster_name"] == "molecule"


def test_state_dir_comes_from_the_environment(host: Any) -> None:
    assert recorded(host)["sparkctl_state_dir"] == os.environ["SPARKCTL_STATE_DIR"]


# hw_profile outside its choices fails while cluster_hw (templated from it) is
# read for the validation, before the choices are checked: the message names
# the value, not the choices.
@pytest.mark.parametrize(
    ("extra_vars", "message"),
    [
        ({"hw_profile": "dgx_station"}, "dgx_station"),
        ({"switch_ports": "swp1"}, "argument 'switch_ports' is of type str"),
        ({"node_rank": "first"}, "argument 'node_rank' is of type str"),
    ],
    ids=["hw_profile", "switch_ports", "node_rank"],
)
def test_argument_spec_refuses(extra_vars: dict[str, Any], message: str) -> None:
    run = converge_check(extra_vars)
    assert run.returncode != 0, run.stdout
    assert failed_task(run.stdout).startswith(
        "sparkctl.spark.cluster_defaults : Validating arguments against arg spec"
    )
    assert message in run.stdout
