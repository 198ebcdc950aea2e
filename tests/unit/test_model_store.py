"""model list/prune: the listing's parser on the node command's output, and what prune
removes and keeps (sparkctl.model_store)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkctl import model_store
from sparkctl.errors import SparkctlError

CACHE = "/var/lib/sparkctl/models"


def test_the_listing_command_reads_a_real_cache(tmp_path: Path) -> None:
    """The shell command itself, run on a cache laid out as the role lays it out: two
    revisions, a hub snapshot, the link, the meta directory and its previous-link."""
    cache = tmp_path / "models"
    for name, size in (("groups", 3000), ("groups-r2", 5000)):
        (cache / name).mkdir(parents=True)
        (cache / name / "model.safetensors").write_bytes(b"x" * size)
    snap = cache / "hub" / "models--org--m" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (cache / ".sparkctl").mkdir()
    (cache / ".sparkctl" / "previous-link").write_text(f"{cache}/groups\n")
    (cache / "current").symlink_to(cache / "groups-r2")
    text = subprocess.run(
        ["sh", "-c", model_store.listing_command(str(cache), str(cache / "current"))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    revs = model_store.parse_listing("spark2", text, str(cache), f"{cache}/groups-r2")
    got = {r.path.rsplit("/", 1)[1]: (r.kind, r.serving, r.previous, r.verified) for r in revs}
    assert got == {
        "groups": ("dir", False, True, False),
        "groups-r2": ("dir", True, False, True),
        "a" * 40: ("hub", False, False, False),
    }
    sizes = {r.path.rsplit("/", 1)[1]: r.size_bytes for r in revs}
    assert sizes["groups-r2"] - sizes["groups"] == 2000 and sizes["groups"] >= 3000


def test_an_unexpected_line_is_refused() -> None:
    with pytest.raises(SparkctlError, match="unexpected line"):
        model_store.parse_listing("spark1", "what\n", CACHE, None)


def _rev(
    path: str, *, serving: bool = False, verified: bool = False, kind: str = "dir"
) -> model_store.Revision:
    return model_store.Revision("spark2", path, 1, kind, serving, False, verified)


def test_prune_removes_only_beside_a_verified_serving_revision() -> None:
    dirs = {"spark2": CACHE}
    old, new = _rev(f"{CACHE}/groups"), _rev(f"{CACHE}/groups-r2", serving=True, verified=True)
    hub = _rev(f"{CACHE}/hub/models--o--m/snapshots/{'b' * 40}", kind="hub")
    plan = model_store.plan_prune([old, new, hub], dirs)
    assert plan.removed == [old]
    assert {r.path: why for r, why in plan.kept} == {
        new.path: "serving",
        hub.path: "a hub snapshot: remove it with huggingface_hub's `hf cache`",
    }
    # the serving revision not verified since its swap: nothing goes
    fresh = _rev(f"{CACHE}/groups-r2", serving=True, verified=False)
    plan = model_store.plan_prune([old, fresh], dirs)
    assert plan.removed == []
    assert "has not passed a verify" in {r.path: w for r, w in plan.kept}[old.path]
    # a head reading its model in place: nothing of its cache serves, nothing goes
    assert model_store.plan_prune([old], dirs).removed == []
    # the inventory's revision, staged for an upgrade, stays
    staged = model_store.plan_prune([old, new], dirs, {"spark2": old.path})
    assert staged.removed == [] and staged.kept[0][1].startswith("the inventory's revision")
    # never anything outside the cache, or a name rm would read otherwise
    odd = _rev(f"{CACHE}/a b")
    outside = _rev("/srv/sparkctl-model/groups")
    plan = model_store.plan_prune([new, odd, outside], dirs)
    assert plan.removed == []


def test_verified_roots_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path))
    assert model_store.verified_roots("sim") == {}
    model_store.record_verified("sim", {"spark1": "/srv/m", "spark2": ""}, "serve verify")
    model_store.record_verified("sim", {"spark2": f"{CACHE}/g"}, "serve upgrade")
    assert model_store.verified_roots("sim") == {"spark1": "/srv/m", "spark2": f"{CACHE}/g"}
