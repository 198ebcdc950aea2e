"""``sparkctl render``: the files provisioning would install, from the inventory alone.

The roles' own templates are rendered on the controller by playbooks/render.yml
(each role's tasks/render.yml), so what is reviewed is exactly what provision
writes. No host is contacted.
"""

from __future__ import annotations

from pathlib import Path

from sparkctl import console, inventory
from sparkctl.errors import SparkctlError
from sparkctl.playbook import cluster_env, results_dir
from sparkctl.runner import run_playbook


def render(inv: inventory.Inventory, out: Path) -> list[Path]:
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    result = run_playbook(
        "render.yml",
        inv.sources,
        results_dir=results_dir(inv.cluster, "render"),
        hosts=len(inv.hostvars),
        extravars={"sparkctl_render_dir": str(out)},
        envvars=cluster_env(inv.cluster),
    )
    if not result.ok:
        detail = "; ".join(f"{f.host}: {f.task}: {f.message}" for f in result.failures)
        raise SparkctlError(
            f"render failed: {detail or result.status} (artifacts in {result.artifact_dir})",
            result.exit_code(),
        )
    files = sorted(p for p in out.rglob("*") if p.is_file())
    console.progress(f"rendered {len(files)} files for {inv.cluster} into {out}")
    return files
