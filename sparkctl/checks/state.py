"""The keys of what the node checks share through ``config.stash``.

They live here, not in conftest.py: pytest imports the plugin as ``conftest``
while the test modules import ``sparkctl.checks.conftest``, two module objects
with two sets of keys, so a node marked down by one was never seen by the
other (every later check then failed on its own instead of being skipped).
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkctl.plan import Plan

PLAN_KEY = pytest.StashKey[Plan]()
RESULTS_KEY = pytest.StashKey[list[dict[str, Any]]]()
FACTS_KEY = pytest.StashKey[dict[str, dict[str, Any]]]()
DOWN_KEY = pytest.StashKey[dict[str, str]]()
HOSTS_KEY = pytest.StashKey[dict[str, Any]]()


def mark_down(config: pytest.Config, node: str, why: str) -> None:
    """``node`` did not answer: its other checks are skipped with ``why``."""
    config.stash[DOWN_KEY][node] = why
