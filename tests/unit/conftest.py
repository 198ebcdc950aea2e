"""The unit tier: never starts ansible-playbook, molecule or a container.

tests/tier_guard/sitecustomize.py refuses such a start while a test of this directory
runs, in pytest's process and in every Python process a test starts; this fixture fails
the test in its teardown when one was refused, even if the test swallowed the error.
Tests that need real Ansible or containers belong to the contract, molecule or lab
tier (docs/development.md, "Test tiers").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _unit_tier_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    log = Path(os.environ["SPARKCTL_TIER_GUARD_LOG"])
    if not log.exists():
        return
    refused = sorted(
        {
            program
            for line in log.read_text().splitlines()
            for test, _, program in [line.partition("\t")]
            if test == request.node.nodeid
        }
    )
    if refused:
        pytest.fail(
            f"the unit tier never starts {', '.join(refused)}; this test did "
            "(move it to tests/contract, tests/molecule or tests/lab)",
            pytrace=False,
        )
