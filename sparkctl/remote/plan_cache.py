"""The plan of an inventory, computed on the controller and cached per input.

``playbooks/validate_plan.yml`` runs every role's ``tasks/plan.yml`` from the
inventory and the roles alone (no host contacted); the JSON it writes is cached
until an input file (the inventory, its group_vars/host_vars, the roles, the
playbooks) or an extra var changes, and read into :class:`sparkctl.plan.Plan`.
validate, serve and the CLI's saved-log gate all load it here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sparkctl import console, inventory
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.paths import collection_dir, playbooks_dir, state_dir
from sparkctl.plan import Plan
from sparkctl.playbook import cluster_env
from sparkctl.runner import run_playbook


def _plan_key(
    inv_sources: Path | Sequence[Path], extravars: Mapping[str, Any] | None = None
) -> str:
    digest = hashlib.sha256(json.dumps(dict(extravars or {}), sort_keys=True).encode())
    sources: list[Path] = []
    # every inventory source (a layout's overlay too) with its group_vars/host_vars
    for inv_path in [inv_sources] if isinstance(inv_sources, Path) else inv_sources:
        base = inv_path.resolve().parent
        sources.append(inv_path.resolve())
        for folder in (base / "group_vars", base / "host_vars"):
            if folder.is_dir():
                sources += sorted(p for p in folder.rglob("*") if p.is_file())
    # The whole collection and every playbook: the plan play reads role defaults and
    # vars, runs plan.yml tasks, and calls the collection's filter, module and
    # module_utils code (a filter edit once left a stale plan). Bytecode caches are not
    # inputs.
    for tree in (collection_dir(), playbooks_dir()):
        sources += sorted(
            p for p in tree.rglob("*") if p.is_file() and "__pycache__" not in p.parts
        )
    for src in sources:
        digest.update(str(src).encode() + b"\0" + src.read_bytes() + b"\0")
    digest.update(str(state_dir()).encode())
    return digest.hexdigest()[:20]


def load_plan(
    inv: inventory.Inventory, run_dir: Path, extravars: Mapping[str, Any] | None = None
) -> Plan:
    """What every node should look like: cached until an input file (or -e) changes."""
    cache = state_dir() / "plans" / f"{inv.cluster}-{_plan_key(inv.sources, extravars)}.json"
    if not cache.is_file():
        cache.parent.mkdir(parents=True, exist_ok=True)
        console.progress("plan: what the inventory implies for every node (validate_plan.yml)")
        tmp = cache.with_suffix(".tmp")
        result = run_playbook(
            "validate_plan.yml",
            inv.sources,
            results_dir=run_dir / "plan",
            hosts=len(inv.hostvars),
            extravars={**dict(extravars or {}), "validate_plan_file": str(tmp)},
            envvars=cluster_env(inv.cluster),
        )
        if not result.ok or not tmp.is_file():
            detail = "; ".join(f"{f.host}: {f.message}" for f in result.failures)
            raise SparkctlError(
                f"could not compute the plan from {inv.path}: "
                f"{detail or result.status} (artifacts in {result.artifact_dir})",
                result.exit_code() if result.failures else ExitCode.BAD_INPUT,
            )
        tmp.replace(cache)
    data = json.loads(cache.read_text())
    plan = Plan.from_dict(data)
    (run_dir / "plan.json").write_text(json.dumps(data, indent=1))
    return plan
