"""The contract suite's environment: a cached virtualenv holding the pinned SGLang release.

The contract tests hold sparkctl (rendered units, the lab's stand-in) against
the real release's own code: its argument parser, its response models, its
port arithmetic. That code imports half of an inference stack, so it runs in
a virtualenv of its own, built once per recipe and kept outside the checkout:

    ${XDG_CACHE_HOME:-~/.cache}/sparkctl/contract/sglang-<pin>-<recipe hash>

* The pin is ``sglang_version`` of roles/sglang/defaults/main.yml, read here
  and nowhere else repeated: moving the pin there moves the suite.
* torch is installed first and alone, as ``torch==2.13.0``, which pip takes
  from this machine's local CPU wheel (any other torch request pulls a
  multi-GB CUDA build from PyPI). Every later install is constrained to that
  torch, so a dependency that asks for another one fails the build instead of
  replacing it.
* The release itself goes in with ``--no-deps`` (its Requires-Dist holds CUDA
  kernels, flashinfer, triton, torch==2.11.0 ...), then only the light
  dependencies the contract tests need to import ``sglang.srt.server_args``
  and ``sglang.srt.entrypoints.openai.protocol``: LIGHT_REQUIREMENTS, pinned
  where the release's Requires-Dist pins them.
* What exists only for GPUs is replaced by import stubs under
  tests/contract/stubs (each says why in its docstring), put on PYTHONPATH by
  :meth:`SGLangRelease.run` and never installed into the venv.

The venv is built in a temporary directory beside its final place and renamed
into place as the last step, under a file lock: a second pytest process waits
for the first one's build and then uses it; a build that failed or was killed
leaves nothing under the final name. Failing to build is a test FAILURE, never
a skip: CI starts from a clean machine and must build it from PyPI.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.background import START_ENV, Background

REPO = Path(__file__).resolve().parents[2]
STUBS = Path(__file__).resolve().parent / "stubs"
SGLANG_DEFAULTS = (
    REPO
    / "ansible_collections"
    / "sparkctl"
    / "spark"
    / "roles"
    / "sglang"
    / "defaults"
    / "main.yml"
)

# This machine's CPU build of torch lies on local disk (pip's find-links,
# /etc/xdg/pip/constraints.txt caps torch there); it stands in for the release's
# torch==2.11.0 CUDA build: the tests import torch, they never compute with it.
TORCH = "torch==2.13.0"
# What `import sglang.srt.server_args` and `import sglang.srt.entrypoints.openai.protocol`
# need beyond torch (found by importing them in an empty venv until nothing was
# missing). Pinned where sglang 0.5.17's Requires-Dist pins (transformers,
# openai, pyzmq's floor); the rest float, as they do for the release.
LIGHT_REQUIREMENTS = (
    "aiohttp",
    "dill",
    "fastapi",
    "ipython",
    "msgspec",
    "numpy",
    "openai==2.6.1",
    "orjson",
    "packaging",
    "partial_json_parser",
    "pillow",
    "psutil",
    "pybase64",
    "pydantic",
    "pyzmq>=25.1.2",
    "requests",
    "sentencepiece",
    "tqdm",
    "transformers==5.12.1",
)
# Installed without their dependencies: xgrammar (a CPU grammar library,
# imported by sglang's constrained decoding at module level) requires triton
# on x86_64 Linux, a GPU compiler, which is stubbed; its other requirements are
# in LIGHT_REQUIREMENTS or TORCH, apache-tvm-ffi at the release's pin.
NO_DEPS_REQUIREMENTS = ("xgrammar==0.2.1", "apache-tvm-ffi==0.1.11")
# pip's progress and each step's output go here inside the venv.
BUILD_LOG = "sparkctl-build.log"
# Written last, before the rename: a venv without it was never finished.
RECIPE_FILE = "sparkctl-recipe.json"
LOCK_TIMEOUT = 3600.0


def _role_pin(name: str) -> str:
    """A release the sglang role pins (its single place: the role's defaults)."""
    pin = yaml.safe_load(SGLANG_DEFAULTS.read_text())[name]
    if not isinstance(pin, str) or not pin:
        raise AssertionError(f"{SGLANG_DEFAULTS}: {name} must be a version string, got {pin!r}")
    return pin


def sglang_pin() -> str:
    """The release the sglang role installs."""
    return _role_pin("sglang_version")


def recipe(pin: str) -> dict[str, Any]:
    """Everything the venv is built from; its hash names the cache directory."""
    stubs = {
        p.relative_to(STUBS).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(STUBS.rglob("*.py"))
    }
    return {
        "sglang": f"sglang=={pin}",
        "python": "{}.{}".format(*sys.version_info[:2]),
        "torch": TORCH,
        "requirements": list(LIGHT_REQUIREMENTS),
        "no_deps": list(NO_DEPS_REQUIREMENTS),
        "stubs": stubs,
    }


def recipe_hash(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sparkctl" / "contract"


@dataclass(frozen=True)
class SGLangRelease:
    """The pinned release, installed: run Python against it with :meth:`run`."""

    version: str
    venv: Path
    python: Path  # the venv's interpreter
    package_dir: Path  # the installed `sglang` package directory
    stubs: Path

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}
        }
        # The stubs first; no byte-code into the checkout's stubs directory (the
        # venv's own files were compiled by pip when installed).
        env.update(
            {"PYTHONPATH": str(self.stubs), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"}
        )
        return env

    def run(self, code: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``python -c code args...`` in the venv with the stub path set (not checked)."""
        return subprocess.run(
            [str(self.python), "-c", code, *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def json(self, code: str, *args: str, timeout: float = 300) -> Any:
        """Run ``code``, which prints one JSON document as its LAST stdout line; return it.

        A non-zero exit fails the calling test with the interpreter's stderr."""
        proc = self.run(code, *args, timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(
                f"python in the sglang {self.version} venv exited "
                f"{proc.returncode}:\n{proc.stderr[-6000:]}"
            )
        lines = proc.stdout.strip().splitlines()
        if not lines:
            raise AssertionError(
                f"no output from the sglang {self.version} venv:\n{proc.stderr[-3000:]}"
            )
        return json.loads(lines[-1])


@contextmanager
def _locked(path: Path, timeout: float) -> Iterator[None]:
    """An exclusive flock on ``path``: one builder per recipe across pytest processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{path} stayed locked for {timeout:.0f} s: is another "
                        "build of the contract venv hanging?"
                    ) from None
                time.sleep(1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class BuildError(Exception):
    """A step of the venv build failed; the message holds the step and its output."""


def _step(log: Path, *argv: str) -> None:
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(argv)}\n")
        out.flush()
        began = time.monotonic()
        proc = subprocess.run(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=3000,
            check=False,
            # START_ENV: built on a background thread while unit tests
            # change os.environ (PATH, state dirs).
            env={**START_ENV, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )
        out.write(f"# exit {proc.returncode} after {time.monotonic() - began:.1f} s\n")
    if proc.returncode != 0:
        tail = "\n".join(
            line
            for line in log.read_text().splitlines()
            if "is ignored: it is neither a file nor a directory" not in line
        )
        raise BuildError(f"{' '.join(argv)} exited {proc.returncode}:\n{tail[-6000:]}")


def _new_venv(dest: Path, what: str) -> tuple[Path, list[str]]:
    """An empty venv in ``dest``: its build log (naming ``what``) and its pip install."""
    subprocess.run(
        [sys.executable, "-m", "venv", str(dest)],
        check=True,
        capture_output=True,
        timeout=600,
        env=START_ENV,
    )
    log = dest / BUILD_LOG
    log.write_text(f"# contract venv for {what}\n")
    return log, [str(dest / "bin" / "python"), "-m", "pip", "install", "--no-input"]


def build_venv(dest: Path, spec: dict[str, Any]) -> None:
    """Build the venv of ``spec`` in ``dest`` (a new directory); RECIPE_FILE is written last."""
    log, pip = _new_venv(dest, spec["sglang"])
    constraints = dest / "sparkctl-constraints.txt"
    # Nothing installed later may move torch (a CUDA torch would come from PyPI).
    constraints.write_text(f"{spec['torch']}\n")
    _step(log, *pip, spec["torch"])
    _step(log, *pip, "--no-deps", spec["sglang"])
    _step(log, *pip, "--constraint", str(constraints), *spec["requirements"])
    _step(log, *pip, "--no-deps", "--constraint", str(constraints), *spec["no_deps"])
    (dest / RECIPE_FILE).write_text(json.dumps(spec, indent=1, sort_keys=True) + "\n")


def ensure_venv(pin: str) -> Path:
    """The finished venv of the current recipe, built first if there is none."""
    spec = recipe(pin)
    return _ensure(f"sglang-{pin}-{recipe_hash(spec)}", spec, build_venv)


def gateway_pin() -> str:
    """The gateway release the sglang role installs."""
    return _role_pin("sglang_gateway_version")


def build_gateway_venv(dest: Path, spec: dict[str, Any]) -> None:
    """smg from PyPI, with its own dependencies, as the role's pip task installs it."""
    log, pip = _new_venv(dest, spec["smg"])
    _step(log, *pip, spec["smg"])
    (dest / RECIPE_FILE).write_text(json.dumps(spec, indent=1, sort_keys=True) + "\n")


def ensure_gateway_venv(pin: str) -> Path:
    """The gateway's venv (smg==pin), built first if there is none."""
    spec = {"smg": f"smg=={pin}", "python": "{}.{}".format(*sys.version_info[:2])}
    return _ensure(f"smg-{pin}-{recipe_hash(spec)}", spec, build_gateway_venv)


def _ensure(name: str, spec: dict[str, Any], build: Callable[[Path, dict[str, Any]], None]) -> Path:
    """The finished venv ``name``, built by ``build(dir, spec)`` first if there is none."""
    root = cache_root()
    final = root / name

    def finished() -> bool:
        return (final / RECIPE_FILE).is_file() and (final / "bin" / "python").exists()

    if finished():
        return final
    with _locked(root / f".{name}.lock", LOCK_TIMEOUT):
        if finished():  # another process built it while we waited
            return final
        # Left by a build that was killed: never used, removed under the lock.
        for stale in root.glob(f".build-{name}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():  # no recipe file: not ours to trust
            shutil.rmtree(final)
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{name}-", dir=root))
        try:
            build(tmp, spec)
            # The venv's console scripts keep the temporary path in their shebang;
            # everything here runs `bin/python -m ...`, which does not care.
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final


def release_from(venv: Path, stubs: Path = STUBS) -> SGLangRelease:
    release = SGLangRelease(
        version="", venv=venv, python=venv / "bin" / "python", package_dir=Path(), stubs=stubs
    )
    # Found, not imported: locating the package does not run sglang/__init__.py.
    found = release.json(
        "import importlib.metadata, importlib.util, json; "
        "s = importlib.util.find_spec('sglang'); "
        "print(json.dumps([importlib.metadata.version('sglang'), s.origin]))"
    )
    return SGLangRelease(
        version=found[0],
        venv=venv,
        python=venv / "bin" / "python",
        package_dir=Path(found[1]).parent,
        stubs=stubs,
    )


BACKGROUND: dict[str, Background] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    """The release venv and the resolutions start in the background when a selected test
    needs them (the contract tier also holds tests of real Ansible that need neither)."""
    here = Path(__file__).resolve().parent
    items = [i for i in session.items if Path(str(i.path)).resolve().is_relative_to(here)]
    if any("sglang_release" in getattr(i, "fixturenames", ()) for i in items):
        BACKGROUND["venv"] = Background(lambda: ensure_venv(sglang_pin()))
    if any("smg_venv" in getattr(i, "fixturenames", ()) for i in items):
        BACKGROUND["smg"] = Background(lambda: ensure_gateway_venv(gateway_pin()))
    if any(Path(str(i.path)).name == "test_resolution.py" for i in items):
        from tests.contract import test_resolution  # noqa: PLC0415 - its own helpers

        BACKGROUND["resolutions"] = Background(test_resolution.resolve_wanted)


@pytest.fixture(scope="session")
def sglang_release() -> SGLangRelease:
    """The pinned SGLang release in its cached venv (built on first use; a failure FAILS)."""
    pin = sglang_pin()
    began = time.monotonic()
    try:
        venv = BACKGROUND["venv"].join() if "venv" in BACKGROUND else ensure_venv(pin)
    except (BuildError, subprocess.SubprocessError, OSError) as exc:
        pytest.fail(f"could not build the contract venv for sglang=={pin}: {exc}", pytrace=False)
    release = release_from(venv)
    if release.version != pin:
        pytest.fail(f"{venv} holds sglang {release.version}, the role pins {pin}", pytrace=False)
    print(f"\ncontract venv {venv} ready in {time.monotonic() - began:.1f} s", file=sys.stderr)
    return release


@pytest.fixture(scope="session")
def smg_venv() -> Path:
    """The pinned gateway release (smg, from PyPI) in its cached venv; a failure FAILS."""
    pin = gateway_pin()
    try:
        venv = BACKGROUND["smg"].join() if "smg" in BACKGROUND else ensure_gateway_venv(pin)
    except (BuildError, subprocess.SubprocessError, OSError) as exc:
        pytest.fail(f"could not build the gateway venv for smg=={pin}: {exc}", pytrace=False)
    return venv


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/contract carries the ``contract`` marker."""
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.path)).resolve().is_relative_to(here):
            item.add_marker(pytest.mark.contract)
