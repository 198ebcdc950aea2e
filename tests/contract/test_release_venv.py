"""The contract venv is the pinned release, with the machine's CPU torch and the stubs in effect.

What the other contract modules rely on: ``sglang_release`` is the version the
role pins, its package directory is the installed release (not a checkout or
the lab's stand-in, which is also a package named ``sglang``), triton resolves
to the release's own mock and torch is the CPU build installed first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.contract import conftest as contract
from tests.contract.conftest import SGLangRelease

pytestmark = pytest.mark.contract

_PROBE = """
import json, sys
import importlib.metadata as md
import torch, triton
import sglang.srt.server_args as sa
import sglang.srt.entrypoints.openai.protocol as protocol
print(json.dumps({
    "torch": torch.__version__, "cuda": torch.version.cuda,
    "triton": repr(triton), "server_args": sa.__file__, "protocol": protocol.__file__,
    "dists": sorted(d.metadata["Name"].lower() for d in md.distributions()),
    "path0": sys.path[1],
}))
"""


def test_the_venv_holds_the_roles_pinned_release(sglang_release: SGLangRelease) -> None:
    pin = yaml.safe_load(contract.SGLANG_DEFAULTS.read_text())["sglang_version"]
    assert sglang_release.version == pin
    assert (sglang_release.package_dir / "srt" / "server_args.py").is_file()
    assert sglang_release.package_dir.is_relative_to(sglang_release.venv)
    recorded = json.loads((sglang_release.venv / contract.RECIPE_FILE).read_text())
    assert recorded == contract.recipe(pin)


def test_imports_resolve_to_the_release_the_cpu_torch_and_the_stubs(
    sglang_release: SGLangRelease,
) -> None:
    seen = sglang_release.json(_PROBE)
    assert Path(seen["server_args"]).is_relative_to(sglang_release.package_dir)
    assert Path(seen["protocol"]).is_relative_to(sglang_release.package_dir)
    assert seen["torch"] == contract.TORCH.split("==")[1] + "+cpu" and seen["cuda"] is None
    assert seen["triton"] == "<triton-stub 'triton'>"  # sglang/_triton_stub.py's repr
    assert seen["path0"] == str(contract.STUBS)
    # Only stubs stand for these: none of them (nor a CUDA runtime) was installed.
    gpu_only = {
        "triton",
        "torchvision",
        "sglang-kernel",
        "sgl-kernel",
        "flashinfer-python",
        "nvidia-cuda-runtime",
        "nvidia-nccl-cu13",
        "cuda-python",
    }
    assert gpu_only.isdisjoint(seen["dists"]), gpu_only & set(seen["dists"])


def test_every_stub_says_it_is_for_importing_only() -> None:
    stubs = sorted(contract.STUBS.rglob("*.py"))
    assert stubs
    for stub in stubs:
        head = stub.read_text().split('"""')[1]
        assert head.startswith("Import stub (the contract venv only, for importing"), stub


def test_the_recipe_follows_the_pin_and_the_stubs(tmp_path: Path) -> None:
    """Moving the pin (or editing a stub) names another cache directory."""
    one, other = contract.recipe("0.5.17"), contract.recipe("0.5.23")
    assert one["sglang"] == "sglang==0.5.17" and other["sglang"] == "sglang==0.5.23"
    assert contract.recipe_hash(one) != contract.recipe_hash(other)
    edited = {**one, "stubs": {**one["stubs"], "sitecustomize.py": "0" * 64}}
    assert contract.recipe_hash(edited) != contract.recipe_hash(one)
    assert contract.recipe_hash(contract.recipe("0.5.17")) == contract.recipe_hash(one)


def test_an_unfinished_venv_is_never_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory under the final name without the recipe file is rebuilt, not trusted."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spec = contract.recipe("9.9.9")
    final = contract.cache_root() / f"sglang-9.9.9-{contract.recipe_hash(spec)}"
    (final / "bin").mkdir(parents=True)
    (final / "bin" / "python").write_text("half-built")
    built: list[Path] = []

    def fake_build(dest: Path, got: dict[str, object]) -> None:
        assert got == spec and dest.name.startswith(f".build-{final.name}-")
        assert dest.parent == final.parent
        built.append(dest)
        (dest / "bin").mkdir()
        (dest / "bin" / "python").write_text("finished")
        (dest / contract.RECIPE_FILE).write_text("{}")

    monkeypatch.setattr(contract, "build_venv", fake_build)
    assert contract.ensure_venv("9.9.9") == final
    assert (final / "bin" / "python").read_text() == "finished" and len(built) == 1
    assert contract.ensure_venv("9.9.9") == final and len(built) == 1  # now reused


def test_a_failed_build_leaves_nothing_under_the_final_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def failing_build(dest: Path, got: dict[str, object]) -> None:
        (dest / "bin").mkdir()
        raise contract.BuildError("pip install exited 1")

    monkeypatch.setattr(contract, "build_venv", failing_build)
    with pytest.raises(contract.BuildError, match="pip install exited 1"):
        contract.ensure_venv("9.9.9")
    left = sorted(p.name for p in contract.cache_root().iterdir())
    assert left == [f".sglang-9.9.9-{contract.recipe_hash(contract.recipe('9.9.9'))}.lock"]


_RACER = """
import json, os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.contract import conftest as contract

work = Path(sys.argv[2])
(work / f"started-{os.getpid()}").touch()

def build(dest, spec):
    # Hold the build until both racers are past their start line, so the other
    # one meets the lock (or a finished venv), never an empty cache.
    deadline = time.monotonic() + 60
    while len(list(work.glob("started-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    with (work / "builds").open("a") as log:
        log.write(f"{os.getpid()}\\n")
    (dest / "bin").mkdir()
    (dest / "bin" / "python").write_text("")
    (dest / contract.RECIPE_FILE).write_text("{}")

contract.build_venv = build
print(contract.ensure_venv("9.9.9"))
"""


def test_two_processes_build_the_venv_once(tmp_path: Path) -> None:
    """The file lock: a second pytest process waits for the first one's build and uses it."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(contract.REPO), str(tmp_path)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [r.communicate(timeout=120)[0].strip() for r in racers]
    assert [r.returncode for r in racers] == [0, 0]
    assert outs[0] == outs[1] and Path(outs[0]).name.startswith("sglang-9.9.9-"), outs
    assert len((tmp_path / "builds").read_text().split()) == 1
