"""roles/preflight: the inventory guard passes this cluster without touching it,
and stops broken variants of it.

The role runs on the controller only (facts-free, delegate_to: localhost).
Converge passed on the scenario's inventory; here each instance is checked
for traces of an Ansible run, and converge.yml is run again, in check mode,
with one rule broken per case (extra variables override the inventory).
"""

# testinfra tests assert; pyproject's per-file-ignores cover tests/** only.
# ruff: noqa: S101

from __future__ import annotations

from typing import Any

import pytest
from verify_helpers import INVENTORY, converge_check, failed_task, podman

testinfra_hosts = [podman(name) for name in INVENTORY.get_hosts("all")]


def test_no_ansible_module_ran_on_the_host(host: Any) -> None:
    # Every module Ansible runs on a host goes through ~/.ansible/tmp there.
    assert not host.file("/root/.ansible").exists


RULES = "sparkctl.spark.preflight : Preflight | Inventory follows the rules"
SPEC = "sparkctl.spark.cluster_defaults : Validating arguments against arg spec"


@pytest.mark.parametrize(
    ("extra_vars", "task", "message"),
    [
        ({"fabric_b_subnet": "192.168.100.0/24"}, RULES, "twins a and b share a subnet"),
        ({"node_rank": 0}, RULES, "rank 0 is also"),
        (
            {"fabric_a_subnet": "10.99.0.0/24"},
            RULES,
            "is not a host address of fabric_a_subnet 10.99.0.0/24",
        ),
        ({"ansible_host": "192.168.100.250"}, RULES, "lies in the fabric subnet of twin a"),
        # cluster_defaults (a dependency) checks the choices even before the rules do.
        (
            {"switch_os": "ios"},
            SPEC,
            "value of switch_os must be one of: linux, nvue, sonic, got: ios",
        ),
        (
            {"switch_ports": {"swp9": {"node": "mol-pre-9", "twin": "a"}}},
            RULES,
            "'mol-pre-9' is not a host in [sparks]",
        ),
        ({"ansible_password": "secret"}, RULES, "passwords are not accepted in inventories"),
        (
            {"preflight_min_ansible_version": "99.0"},
            "sparkctl.spark.preflight : Preflight | Ansible is recent enough",
            "is older than 99.0",
        ),
    ],
    ids=[
        "same-subnet",
        "duplicate-rank",
        "ip-outside-subnet",
        "mgmt-in-fabric",
        "switch-os",
        "port-to-unknown-node",
        "password",
        "old-ansible",
    ],
)
def test_broken_inventory_is_stopped(extra_vars: dict[str, Any], task: str, message: str) -> None:
    run = converge_check(extra_vars)
    assert run.returncode != 0, run.stdout
    assert failed_task(run.stdout).startswith(task), run.stdout
    assert message in run.stdout
