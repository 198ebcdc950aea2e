"""A TP layout is a second inventory source (sparkctl/layout.py), and every role reads it.

``inventory/sim.ini`` (one group of four) rendered through the real ``sparkctl render``
(playbooks/render.yml through ansible-runner, the overlay passed as a second ``-i``)
with the ``tp2x2`` layout must give each Spark the SGLang unit that
``inventory/sim-two-groups.ini`` (the same Sparks, two groups of two written in the
inventory, the gateway on) gives it, but for the groups' names; so must the firewall, the
gateway's unit and Prometheus's targets. The operator's inventory is not touched.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkctl import inventory, layout
from tests.conftest import REPO, Rendered

pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
)

SIM = REPO / "inventory" / "sim.ini"
UNIT = "etc/systemd/system/sparkctl-sglang.service"
# the files that differ between sim.ini and sim-two-groups.ini (tests/contract/test_render.py)
COMPARED = (
    UNIT,
    "etc/systemd/system/sparkctl-gateway.service",
    "etc/sparkctl/sglang-firewall.nft",
    "etc/prometheus/prometheus.yml",
)


def test_the_tp2x2_layout_of_sim_renders_what_two_groups_written_in_the_inventory_render(
    rendered_inventory: Callable[[str], Rendered],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sparkctl.render import render  # noqa: PLC0415 -- ansible-runner

    two = rendered_inventory("sim-two-groups")
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("SPARKCTL_SGLANG_API_KEY", raising=False)
    before = SIM.read_bytes()
    inv = inventory.validate(SIM)
    (tp2x2,) = layout.parse("tp2x2", len(inv.nodes))
    target = layout.apply(inv, tp2x2)
    assert target.overlay is not None and target.sources == (SIM, target.overlay)
    files = render(target, tmp_path / "out")
    assert SIM.read_bytes() == before

    out = (tmp_path / "out").resolve()
    names = {"a": "tp2x2-1", "b": "tp2x2-2"}  # sim-two-groups.ini's groups, in head order
    ours = {f.relative_to(out).as_posix() for f in files}
    theirs = {f.relative_to(two.out).as_posix() for f in two.files}
    assert ours == theirs
    compared = 0
    for rel in sorted(ours):
        if not rel.endswith(COMPARED):
            continue
        want = (two.out / rel).read_text()
        for old, new in names.items():
            want = re.sub(rf"(\bgroup[ =:\"']+){old}\b", rf"\g<1>{new}", want)
        got = (out / rel).read_text()
        assert got == want, rel
        compared += 1
    # every Spark's unit, the first head's gateway and firewall, Prometheus's file
    assert compared >= len(inv.nodes) + 2
    for node in inv.nodes:
        unit = (out / node.name / UNIT).read_text()
        assert " --tp-size 2 --nnodes 2 " in unit, (node.name, unit)
