"""The two wheels, built from this checkout and used as an operator would.

- ``sparkctl`` (the product): the package, its playbooks and inventories under
  sparkctl/_data, and the Ansible collection as ansible_collections/sparkctl/spark;
  no lab code, no stand-in, no test, no molecule scenario.
- ``sparkctl-lab`` (lab/): the rehearsal lab with its stand-ins, which plugs
  ``sparkctl lab`` in through the ``sparkctl.commands`` entry point.

Both are built with PyPA's build frontend and this project's backend (hatchling,
no isolation: nothing is fetched here). The product wheel is installed into a
clean virtualenv - its dependencies from the package index, as on a controller -
where ``sparkctl render`` must write exactly what the checkout's render writes,
and ``sparkctl lab`` must say how to get the lab; then the lab wheel goes in
beside it and ``sparkctl lab`` is there. The contents of each wheel, counted by
room, are printed at the end of the run.
"""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkctl import __version__
from tests.conftest import REPO

LAB = REPO / "lab"
RENDERED = REPO / "inventory" / "lab.ini"

# What no file of the product wheel may be, by its path inside the wheel: a top-level
# directory of the lab, the tests or the benchmarks, or a stand-in or scenario anywhere.
# (sparkctl/_data/inventory/ keeps lab.ini and sim.ini: the lab is an inventory too.)
NOT_AT_TOP = ("sparkctl_lab/", "lab/", "tests/", "benchmarks/")
NOT_ANYWHERE = ("/standins/", "/molecule/", "/tests/")


def _run(
    argv: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: int = 900
) -> str:
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _build(source: Path, out: Path) -> Path:
    _run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), "."],
        cwd=source,
    )
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def rooms(request: pytest.FixtureRequest) -> Iterator[dict[str, Counter[str]]]:
    """Files per room of each wheel, printed once the module is done."""
    seen: dict[str, Counter[str]] = {}
    yield seen
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or not seen:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_sep("-", "wheel contents (files per room)")
        for wheel, counts in seen.items():
            reporter.write_line(f"  {wheel}: {sum(counts.values())} files")
            for room, n in sorted(counts.items()):
                reporter.write_line(f"    {n:5d}  {room}")


def _room(name: str) -> str:
    parts = name.split("/")
    if parts[0] == "ansible_collections" and len(parts) > 4:
        return "/".join(parts[:4]) + "/"
    if parts[0] == "ansible_collections":
        return "ansible_collections/sparkctl/spark/ (top files)"
    if parts[0].endswith(".dist-info"):
        return "*.dist-info/"
    if len(parts) > 3 and parts[1] == "_data":
        return "/".join(parts[:3]) + "/"
    if len(parts) > 2 and parts[1] == "standins":
        return "/".join(parts[:2]) + "/"
    return parts[0] + "/" if len(parts) > 1 else name


@pytest.fixture(scope="module")
def wheels(
    tmp_path_factory: pytest.TempPathFactory, rooms: dict[str, Counter[str]]
) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    built = {"sparkctl": _build(REPO, out / "sparkctl"), "sparkctl-lab": _build(LAB, out / "lab")}
    for wheel in built.values():
        with zipfile.ZipFile(wheel) as zf:
            rooms[wheel.name] = Counter(_room(n) for n in zf.namelist())
    return built


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_the_product_wheel_holds_no_lab_stand_in_or_test(wheels: dict[str, Path]) -> None:
    names = _names(wheels["sparkctl"])
    assert wheels["sparkctl"].name == f"sparkctl-{__version__}-py3-none-any.whl"
    assert [
        n for n in names if n.startswith(NOT_AT_TOP) or any(bad in n for bad in NOT_ANYWHERE)
    ] == []
    # ... and everything an installed sparkctl runs on.
    for needed in (
        "sparkctl/cli.py",
        "sparkctl/_data/playbooks/site.yml",
        "sparkctl/_data/inventory/lab.ini",
        "ansible_collections/sparkctl/spark/galaxy.yml",
        "ansible_collections/sparkctl/spark/plugins/module_utils/tool_output.py",
        "ansible_collections/sparkctl/spark/roles/sglang/tasks/main.yml",
    ):
        assert needed in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(wheels["sparkctl"]) as zf:
        assert "sparkctl.commands" not in zf.read(entry_points).decode()


def test_the_lab_wheel_holds_the_stand_ins_and_plugs_in_the_lab_command(
    wheels: dict[str, Path],
) -> None:
    wheel = wheels["sparkctl-lab"]
    assert wheel.name == f"sparkctl_lab-{__version__}-py3-none-any.whl"
    names = _names(wheel)
    assert {n.split("/")[0] for n in names} == {
        "sparkctl_lab",
        wheel.name.removesuffix("-py3-none-any.whl") + ".dist-info",
    }
    for needed in (
        "sparkctl_lab/cli.py",
        "sparkctl_lab/standins/nvidia-smi",
        "sparkctl_lab/assets/containers.conf",
    ):
        assert needed in names
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = zf.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert f"Requires-Dist: sparkctl=={__version__}" in meta.splitlines()
    assert "[sparkctl.commands]\nlab = sparkctl_lab.cli:lab" in entry_points


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory: pytest.TempPathFactory, wheels: dict[str, Path]) -> Path:
    """A new virtualenv (no system site-packages) with the product wheel and what it
    requires from the package index. --no-compile: pip byte-compiles every module it
    installs, ansible's thousands among them, which was half of this fixture's time (51
    -> 31 s on a 2-core machine); Python compiles the few the tests import when they
    import them."""
    venv = tmp_path_factory.mktemp("venv") / "controller"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=venv.parent)
    _run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-compile",
            str(wheels["sparkctl"]),
        ],
        cwd=venv.parent,
    )
    return venv


def _env(venv: Path, home: Path) -> dict[str, str]:
    """No checkout on any path: the installed package and its data only."""
    home.mkdir(exist_ok=True)
    return {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "SPARKCTL_STATE_DIR": str(home / "state"),
    }


def test_an_installed_product_renders_what_the_checkout_renders(
    clean_venv: Path, tmp_path: Path
) -> None:
    sparkctl = str(clean_venv / "bin" / "sparkctl")
    env = _env(clean_venv, tmp_path / "home")
    where = _run(
        [
            str(clean_venv / "bin" / "python"),
            "-c",
            "import sparkctl.paths as p; print(p.collection_dir())",
        ],
        cwd=tmp_path,
        env=env,
    ).strip()
    assert where.startswith(str(clean_venv)), where  # the wheel's collection, not the checkout's
    _run(
        [sparkctl, "render", str(RENDERED), "-o", str(tmp_path / "installed")],
        cwd=tmp_path,
        env=env,
    )
    checkout_env = {**os.environ, "SPARKCTL_STATE_DIR": str(tmp_path / "checkout-state")}
    _run(
        [
            str(Path(sys.executable).parent / "sparkctl"),
            "render",
            str(RENDERED),
            "-o",
            str(tmp_path / "checkout"),
        ],
        cwd=REPO,
        env=checkout_env,
    )
    installed = sorted(
        p.relative_to(tmp_path / "installed")
        for p in (tmp_path / "installed").rglob("*")
        if p.is_file()
    )
    checkout = sorted(
        p.relative_to(tmp_path / "checkout")
        for p in (tmp_path / "checkout").rglob("*")
        if p.is_file()
    )
    assert installed == checkout
    assert len(installed) > 50
    _, mismatch, errors = filecmp.cmpfiles(
        tmp_path / "installed", tmp_path / "checkout", [str(p) for p in installed], shallow=False
    )
    assert (mismatch, errors) == ([], [])


def test_without_the_lab_wheel_sparkctl_lab_says_how_to_get_it_and_with_it_is_there(
    clean_venv: Path, wheels: dict[str, Path], tmp_path: Path
) -> None:
    sparkctl = str(clean_venv / "bin" / "sparkctl")
    env = _env(clean_venv, tmp_path / "home")
    proc = subprocess.run(
        [sparkctl, "lab", "up"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 4, proc
    assert "sparkctl lab needs the sparkctl-lab package" in proc.stderr
    assert "pip install -e ./lab" in proc.stderr
    python = str(clean_venv / "bin" / "python")
    assert (
        subprocess.run(
            [python, "-c", "import sparkctl_lab"], env=env, capture_output=True, check=False
        ).returncode
        == 1
    )
    _run(
        [python, "-m", "pip", "install", "-q", "--no-deps", str(wheels["sparkctl-lab"])],
        cwd=tmp_path,
    )
    try:
        out = _run([sparkctl, "lab", "--help"], cwd=tmp_path, env=env)
        assert "The rehearsal lab" in out
        for command in ("up", "down", "status", "ssh", "port", "reboot", "model"):
            assert f"\n  {command} " in out
    finally:
        _run([python, "-m", "pip", "uninstall", "-q", "-y", "sparkctl-lab"], cwd=tmp_path)
