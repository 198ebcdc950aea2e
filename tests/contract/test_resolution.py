"""The sglang role's venv method resolves on a Spark, with wheels only.

The requirement is the role's own (``_sglang_pip_requirement`` in
roles/sglang/vars/main.yml, which tasks/install_venv.yml installs), rendered
with the pinned ``sglang_version``. pip resolves it as a Spark's pip would:

    pip install --dry-run --ignore-installed --only-binary=:all:
        --platform manylinux_2_39_aarch64 ... --platform manylinux2014_aarch64
        --python-version 3.12 --implementation cp --target T --report R REQ

* Every glibc level a Spark accepts is listed: DGX OS 7 is Ubuntu 24.04
  (glibc 2.39), and pip does not widen ``--platform manylinux_2_39_aarch64``
  to the older manylinux tags the way it does for its own platform
  (pypa/pip#10760); without them not even sglang (manylinux_2_34) is found.
* Environment markers are evaluated for the Spark (tests/contract/pip_as_spark.py):
  pip would otherwise evaluate them for this x86_64 controller.
* pip's configuration files and this machine's local wheel directories are
  left out (PIP_CONFIG_FILE=/dev/null): a Spark sees PyPI, not /opt/wheels.
* ``--use-feature=fast-deps`` reads each wheel's metadata with HTTP range
  requests: the index this machine reaches lists no PEP 658 metadata files
  (its JSON simple API has no ``core-metadata`` keys), and without them pip
  downloads every wheel (torch, cuDNN, cuBLAS: several GB) to read it.

A resolution still takes one to three minutes of network time, so its result
(report, exit code, log tail) is cached per recipe (requirement, pin, flags,
markers, pip version) in ${XDG_CACHE_HOME:-~/.cache}/sparkctl/contract/resolution;
SPARKCTL_CONTRACT_REFRESH=1 resolves again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from tests.contract import pip_as_spark
from tests.contract.conftest import REPO, cache_root, sglang_pin

pytestmark = pytest.mark.contract

ROLE = REPO / "ansible_collections" / "sparkctl" / "spark" / "roles" / "sglang"
PYTHON_VERSION = "3.12"  # Ubuntu 24.04's python3 (pip_as_spark.SPARK_MARKERS)
GLIBC_MINOR = 39  # Ubuntu 24.04's glibc 2.39
# The oldest manylinux level for aarch64 is glibc 2.17 (PEP 599: manylinux2014).
PLATFORMS = [f"manylinux_2_{minor}_aarch64" for minor in range(GLIBC_MINOR, 16, -1)] + [
    "manylinux2014_aarch64",
    "linux_aarch64",
]
TIMEOUT = 1500


def venv_requirement() -> str:
    """The requirement the venv method installs, from the one place the role keeps it."""
    task = yaml.safe_load((ROLE / "tasks" / "install_venv.yml").read_text())
    (pip_task,) = [t for t in task if "ansible.builtin.pip" in t]
    variable = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_sglang_pip_requirement"]
    assert pip_task["ansible.builtin.pip"]["name"] == "{{ _sglang_pip_requirement }}", pip_task
    requirement: str = jinja2.Template(variable, undefined=jinja2.StrictUndefined).render(
        sglang_version=sglang_pin()
    )
    return requirement


@dataclass(frozen=True)
class Resolution:
    requirement: str
    returncode: int
    report: dict[str, Any] | None
    log: str  # pip's output, its last 20000 characters
    seconds: float
    cached: bool

    def installs(self) -> dict[str, dict[str, Any]]:
        assert self.report is not None, self.log[-4000:]
        return {i["metadata"]["name"].lower().replace("_", "-"): i for i in self.report["install"]}


def _argv(requirement: str, target: Path, report: Path) -> list[str]:
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    return [
        "install",
        "--dry-run",
        "--ignore-installed",
        "--only-binary=:all:",
        *platforms,
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        "--target",
        str(target),
        "--report",
        str(report),
        "--no-cache-dir",
        "--no-input",
        "--use-feature=fast-deps",
        requirement,
    ]


def _cache_file(requirement: str) -> Path:
    pip_version = subprocess.run(
        [sys.executable, "-m", "pip", "--version"], check=True, capture_output=True, text=True
    ).stdout.split()[1]
    key = {
        "argv": _argv(requirement, Path("T"), Path("R")),
        "markers": pip_as_spark.SPARK_MARKERS,
        "pip": pip_version,
        "wrapper": hashlib.sha256(Path(pip_as_spark.__file__).read_bytes()).hexdigest(),
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    slug = re.sub(r"[^A-Za-z0-9.=-]+", "_", requirement)
    return cache_root() / "resolution" / f"{slug}-{digest}.json"


def _pip_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PIP_") or k in {"PIP_CERT", "PIP_DEFAULT_TIMEOUT"}
    }
    env.update({"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return env


def resolve_all(requirements: list[str]) -> dict[str, Resolution]:
    """Each requirement's resolution: from the cache, else pip (all of them at once)."""
    refresh = os.environ.get("SPARKCTL_CONTRACT_REFRESH") == "1"
    done: dict[str, Resolution] = {}
    running = []
    for requirement in requirements:
        cached = _cache_file(requirement)
        if cached.is_file() and not refresh:
            data = json.loads(cached.read_text())
            done[requirement] = Resolution(cached=True, **data)
            continue
        work = Path(tempfile.mkdtemp(prefix="sparkctl-resolve-"))
        log = (work / "pip.log").open("w")
        proc = subprocess.Popen(
            [
                sys.executable,
                pip_as_spark.__file__,
                *_argv(requirement, work / "target", work / "report.json"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_pip_env(),
            text=True,
        )
        running.append((requirement, cached, work, log, proc, time.monotonic()))
    for requirement, cached, work, log, proc, began in running:
        try:
            returncode = proc.wait(timeout=TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
        report = work / "report.json"
        data = {
            "requirement": requirement,
            "returncode": returncode,
            "report": json.loads(report.read_text()) if report.is_file() else None,
            "log": (work / "pip.log").read_text()[-20000:],
            "seconds": round(time.monotonic() - began, 1),
        }
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(data))
        partial.replace(cached)  # never a half-written cache file
        shutil.rmtree(work)
        done[requirement] = Resolution(cached=False, **data)
    for r in done.values():
        print(
            f"\nresolved {r.requirement} for aarch64: exit {r.returncode}, {r.seconds} s"
            f"{' (cached)' if r.cached else ''}",
            file=sys.stderr,
        )
    return done


def resolve_wanted() -> dict[str, Resolution]:
    """The venv requirement and its [all] form, resolved for a Spark."""
    requirement = venv_requirement()
    return resolve_all([requirement, _with_all(requirement)])


@pytest.fixture(scope="module")
def resolutions() -> dict[str, Resolution]:
    from tests.contract.conftest import BACKGROUND  # noqa: PLC0415 - started at collection

    wanted = BACKGROUND.get("resolutions")
    return wanted.join() if wanted is not None else resolve_wanted()


def _with_all(requirement: str) -> str:
    name, sep, version = requirement.partition("==")
    assert sep and name == "sglang", requirement
    return f"sglang[all]=={version}"


def test_the_requirement_is_the_roles_pin() -> None:
    assert venv_requirement() == f"sglang=={sglang_pin()}"


def test_the_venv_requirement_resolves_with_wheels_only_for_aarch64(
    resolutions: dict[str, Resolution],
) -> None:
    r = resolutions[venv_requirement()]
    assert r.returncode == 0, r.log[-6000:]
    assert r.report is not None
    # The markers pip evaluated (the report says which): a Spark's, not this machine's.
    assert r.report["environment"]["platform_machine"] == "aarch64"
    assert r.report["environment"]["python_version"] == PYTHON_VERSION
    installs = r.installs()
    assert installs["sglang"]["metadata"]["version"] == sglang_pin()
    not_wheels = {
        name: i["download_info"]["url"]
        for name, i in installs.items()
        if not i["download_info"]["url"].endswith(".whl")
    }
    assert not_wheels == {}
    tags = {
        name: i["download_info"]["url"].rsplit("/", 1)[-1].removesuffix(".whl").split("-")[-1]
        for name, i in installs.items()
    }
    foreign = {
        n: t
        for n, t in tags.items()
        if t != "any" and not all(p.endswith("aarch64") for p in t.split("."))
    }
    assert foreign == {}


def test_the_torch_it_picks_is_a_cuda_13_build_for_aarch64(
    resolutions: dict[str, Resolution],
) -> None:
    torch = resolutions[venv_requirement()].installs()["torch"]
    wheel = torch["download_info"]["url"].rsplit("/", 1)[-1]
    assert re.fullmatch(r"torch-[0-9.]+-cp312-cp312-manylinux_2_\d+_aarch64\.whl", wheel), wheel
    assert "+cpu" not in torch["metadata"]["version"]
    # PyPI's aarch64 torch carries its CUDA as dependencies: the toolkit and the
    # cuNN-suffixed NVIDIA libraries; all of them must be CUDA 13.
    requires = [
        req.split(";")[0].strip()
        for req in torch["metadata"]["requires_dist"]
        if "extra ==" not in req
    ]
    toolkit = [req for req in requires if re.match(r"cuda-toolkit\b", req)]
    assert len(toolkit) == 1 and re.search(r"==13\.", toolkit[0]), requires
    suffixes = {m.group(1) for req in requires if (m := re.match(r"nvidia-[a-z-]+-cu(\d+)", req))}
    assert suffixes == {"13"}, requires
    installs = resolutions[venv_requirement()].installs()
    assert installs["cuda-toolkit"]["metadata"]["version"].startswith("13.")
    assert not [
        n
        for n in installs
        if re.fullmatch(r"nvidia-.*-cu12", n)
        and n in {re.split(r"[\[=<>~! ]", r)[0] for r in requires}
    ]


def test_sglang_all_fails_on_aarch64_for_lack_of_xatlas_wheels(
    resolutions: dict[str, Resolution],
) -> None:
    """Why the role installs plain sglang: [all] pulls the diffusion extra, and one of its
    requirements, xatlas, has no wheel for linux aarch64 (only sources, which
    --only-binary refuses and a Spark would have to compile)."""
    everything = resolutions[_with_all(venv_requirement())]
    assert everything.returncode != 0
    missing = re.findall(
        r"No matching distribution found for (\S+)(?: \(from ([^)]*)\))?", everything.log
    )
    assert missing == [("xatlas", "sglang[diffusion]")], everything.log[-4000:]
    # And xatlas reaches [all] exactly that way in the release's metadata.
    requires = resolutions[venv_requirement()].installs()["sglang"]["metadata"]["requires_dist"]
    assert 'xatlas; extra == "diffusion"' in requires
    assert 'sglang[diffusion]; extra == "all"' in requires
