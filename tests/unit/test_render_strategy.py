"""render.yml's plays run inline (playbooks/strategy_plugins/sparkctl_inline.py): the
same files as Ansible's own linear strategy, byte for byte and mode for mode.

``sparkctl render`` runs its tasks in the controller's process instead of one
forked worker per task and host. The
session's renders (tests/conftest.py, inline) are compared here with renders of
the same inventories in the same environment with
``-e sparkctl_render_strategy=linear``, which is Ansible unchanged.
"""

from __future__ import annotations

import stat
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkctl.provision import cluster_env
from sparkctl.runner import run_playbook
from tests.conftest import RENDER_API_KEYS, REPO, Rendered


def _tree(root: Path) -> dict[str, tuple[int, bytes]]:
    return {str(p.relative_to(root)): (stat.S_IMODE(p.stat().st_mode),
                                       p.read_bytes() if p.is_file() else b"")
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("name", ["sim", "lab"])
def test_inline_render_is_linear_render(name: str, rendered_inventory: Callable[[str], Rendered],
                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inline = rendered_inventory(name)
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    key = RENDER_API_KEYS[name]
    if key is None:
        monkeypatch.delenv("SPARKCTL_SGLANG_API_KEY", raising=False)
    else:
        monkeypatch.setenv("SPARKCTL_SGLANG_API_KEY", key)
    out = tmp_path / "out"
    out.mkdir()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "AnsibleCollectionFinder has already been configured",
                                UserWarning)
        result = run_playbook("render.yml", REPO / "inventory" / f"{name}.ini",
                              results_dir=tmp_path / "runs", hosts=len(inline.inv.hostvars),
                              extravars={"sparkctl_render_dir": str(out),
                                         "sparkctl_render_strategy": "linear"},
                              envvars=cluster_env(inline.inv.cluster))
    assert result.ok, result.failures
    linear, ours = _tree(out), _tree(inline.out)
    assert sorted(linear) == sorted(ours)
    assert linear == ours
    assert len([k for k, (_, data) in ours.items() if data]) >= 50  # files, not only dirs
