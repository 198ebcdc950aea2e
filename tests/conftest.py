"""Shared fixtures: the rehearsal lab is brought up once per test session, and every
example inventory is rendered (``sparkctl render``) at most once per session."""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from sparkctl import inventory
from sparkctl.inventory import Inventory
from tests.background import QUIET_OVER, RUNNING, START_ENV, Background, wait_for
from tests.labhost import HostSnapshot, cluster_state, state_diff
from tests.unit.pathload import load_file

# The unit tier's guard (tests/tier_guard/sitecustomize.py): in this process, and, through
# PYTHONPATH, in every Python process a test starts.
TIER_GUARD = Path(__file__).resolve().parent / "tier_guard"
load_file("sparkctl_tier_guard", TIER_GUARD / "sitecustomize.py")
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(TIER_GUARD), os.environ.get("PYTHONPATH", "")) if p
)
# What it refused, per test (xdist's workers inherit the controller's file).
os.environ.setdefault(
    "SPARKCTL_TIER_GUARD_LOG", str(Path(tempfile.gettempdir()) / f"sparkctl-tier-{os.getpid()}.log")
)

REPO = Path(__file__).resolve().parent.parent
SIM_INVENTORY = REPO / "inventory" / "sim.ini"


def sparkctl(
    *args: str, check: bool = False, timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the sparkctl CLI as a user would, in a subprocess."""
    # stdin /dev/null: see sparkctl.proc.run (ssh and ansible-core share no stdin).
    proc = subprocess.run(
        [sys.executable, "-m", "sparkctl", *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"sparkctl {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def lab_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root"
    for tool in ("podman", "runc", "debootstrap", "ip", "tc", "nsenter", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def _phase(item: pytest.Item) -> tuple[bool, int, bool, bool, bool, bool, bool]:
    """The order of a session's tests (the sort is stable: within a phase, file order):

    1. the unit tests, then the contract suite (its venv and its aarch64 resolutions are
       built in the background meanwhile, tests/contract/conftest.py);
    2. the lab tests that neither measure nor serve, beside a first pass that
       scripts/test.sh runs at the same time;
    3. the tests that need the host to themselves (wait_quiet): the modules marked
       host_processes (they read every process of this host) first, then those marked
       quiet_host (bandwidth measured on the lab);
    4. the module marked serves_lab (test_serve: its own measuring tests, marked
       quiet_host, first in the file), then those marked regroups_lab (they provision
       the lab into other TP groups, so nothing after them needs the lab as it was);
       the molecule scenarios run beside these (tests/background.py, QUIET_OVER);
    5. the molecule tier, whose tests wait for their scenarios' results;
    6. the tests marked lab_teardown, which take the shared lab down."""
    tier = _tier(item)
    host = item.get_closest_marker("host_processes") is not None
    serves = item.get_closest_marker("serves_lab") is not None
    group = 2 if host else {"unit": 0, "contract": 1}.get(tier or "", 2)
    return (
        item.get_closest_marker("lab_teardown") is not None,
        group,
        tier == "molecule",
        item.get_closest_marker("regroups_lab") is not None,
        serves,
        _wants_quiet(item) and not serves,
        not host,
    )


def _wants_quiet(node: pytest.Item | pytest.Collector) -> bool:
    return any(node.get_closest_marker(m) is not None for m in ("quiet_host", "host_processes"))


# The tests that come after the session's last one that wants the host to itself: the
# first of them to run lets the molecule scenarios start (tests/background.py, QUIET_OVER).
_AFTER_QUIET: set[str] = set()


def wait_first_pass() -> None:
    """Until the first pass that scripts/test.sh runs beside this one is over (its
    process, SPARKCTL_FIRST_PASS_PID, gone): a no-op in any other run."""
    pid = os.environ.get("SPARKCTL_FIRST_PASS_PID")
    if not pid:
        return
    while True:
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return
        time.sleep(1)


def wait_quiet() -> None:
    """Nothing of the suite's own beside the test: no molecule scenario (they start only
    after the last test that waits here, so this waits only where the order was changed
    by hand), no first pass."""
    if QUIET_OVER.is_set():
        wait_for("molecule")
    wait_first_pass()


def needed_after(request: pytest.FixtureRequest) -> bool:
    """Whether a test after this module's last one uses the lab, other than taking it down
    (the lab_teardown tests): a module that changed the lab restores it only then."""
    items = request.session.items
    here = Path(str(request.path)).resolve()
    mine = [i for i, item in enumerate(items) if Path(str(item.path)).resolve() == here]
    later = items[mine[-1] + 1 :] if mine else []
    return any(
        item.get_closest_marker("lab") is not None
        and item.get_closest_marker("lab_teardown") is None
        and _tier(item) != "molecule"  # its scenarios run in containers of their own
        for item in later
    )


TIERS = ("unit", "contract", "molecule", "lab")


def _tier(item: pytest.Item) -> str | None:
    """The tier is the directory: tests/unit, tests/contract, tests/molecule, tests/lab."""
    parts = Path(str(item.path)).resolve().relative_to(REPO).parts
    return parts[1] if len(parts) > 2 and parts[1] in TIERS else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = _tier(item)
        if tier is not None and item.get_closest_marker(tier) is None:
            item.add_marker(tier)  # -m unit, -m contract, -m molecule, -m lab
    items.sort(key=_phase)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "lab_teardown: runs after every other test")
    config.addinivalue_line(
        "markers",
        "regroups_lab: provisions the lab into other TP groups, so it runs after the other "
        "lab tests (and before lab_teardown)",
    )
    config.addinivalue_line(
        "markers",
        "serves_lab: serves the model on the lab (test_serve), after the quiet_host tests "
        "and before regroups_lab; its own quiet_host tests come first in its file",
    )
    config.addinivalue_line(
        "markers",
        "quiet_host: measures bandwidth on the lab, so it waits until no background "
        "molecule scenario or first pass shares the host (runs after the lab tests that "
        "neither measure nor serve, before the molecule scenarios start)",
    )


@pytest.fixture(scope="session")
def promtool() -> str:
    """promtool from Debian's prometheus package (scripts/bootstrap.sh installs it): the rule
    and configuration tests need it, so under CI its absence fails them."""
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: apt-get install prometheus (scripts/bootstrap.sh)")
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    return found


@pytest.fixture(scope="module", autouse=True)
def _quiet_module(request: pytest.FixtureRequest) -> None:
    """A module marked quiet_host or host_processes as a whole waits before its module
    fixtures run (test_validate's first validate); test_serve's `served` waits itself."""
    if _wants_quiet(request.node):
        wait_quiet()


@pytest.fixture(autouse=True)
def _quiet_host(request: pytest.FixtureRequest) -> None:
    if _wants_quiet(request.node):
        wait_quiet()
    elif request.node.nodeid in _AFTER_QUIET:
        QUIET_OVER.set()


_IMAGE_LOCK = threading.Lock()
_IMAGE_CODE = "from tests.lab_bringup import image; print(image())"


def lab_image() -> str:
    """The lab node image, built once when missing. The molecule scenarios and the lab's
    bring-up both need it and start at the same time: one builds, the other waits. In a
    process of its own, with the environment the session started with (START_ENV): this
    runs on a background thread while unit tests change os.environ."""
    with _IMAGE_LOCK:
        proc = subprocess.run(
            [sys.executable, "-c", _IMAGE_CODE],
            capture_output=True,
            text=True,
            env=START_ENV,
            cwd=REPO,
            timeout=3600,
            check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(
            f"building the lab image failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    return proc.stdout.strip().splitlines()[-1]


@dataclass
class LabSession:
    """What the lab tests share: the inventory and the host state from before ``lab up``."""

    inventory: Inventory
    before: HostSnapshot | None  # None when an already running lab was reused


@dataclass(frozen=True)
class _BroughtUp:
    before: HostSnapshot | None
    returncode: int
    stderr: str


def _bring_up_lab() -> _BroughtUp:
    """`lab up` from no lab at all (or the running one, with SPARKCTL_KEEP_LAB=1), with the
    host's state from before it: tests/lab_bringup.py, a process with the environment the
    session started with. When scripts/test.sh already ran it beside its first pass, its
    output is in the file SPARKCTL_LAB_BROUGHT_UP names, and that is the bring-up."""
    early = os.environ.get("SPARKCTL_LAB_BROUGHT_UP")
    if early:
        path = Path(early)
        errors = path.with_name(path.name + ".err")
        brought = _brought_up(
            path.read_text() if path.is_file() else "",
            errors.read_text() if errors.is_file() else "",
        )
        if brought is not None:
            return brought
        # Unreadable (the early run was killed): bring the lab up here after all.
    lab_image()
    proc = subprocess.run(
        [sys.executable, "-m", "tests.lab_bringup"],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        env=START_ENV,
        cwd=REPO,
        timeout=3600,
        check=False,
    )
    brought = _brought_up(proc.stdout, proc.stderr)
    if brought is None:
        return _BroughtUp(None, proc.returncode or 1, proc.stdout[-2000:] + proc.stderr[-4000:])
    return brought


def _brought_up(stdout: str, stderr: str) -> _BroughtUp | None:
    """tests/lab_bringup.py's JSON line; None when there is none."""
    try:
        out = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    sys.stderr.write(stderr)
    before = (
        None
        if out["before"] is None
        else HostSnapshot(
            links=frozenset(out["before"]["links"]),
            containers=frozenset(out["before"]["containers"]),
            networks=frozenset(out["before"]["networks"]),
            firewall=tuple(out["before"]["firewall"]),
        )
    )
    return _BroughtUp(before, int(out["returncode"]), str(out["stderr"]))


def _lab_selected(session: pytest.Session) -> bool:
    lab_tests = REPO / "tests" / "lab"
    return any(Path(str(item.path)).resolve().is_relative_to(lab_tests) for item in session.items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The lab comes up in the background while the unit tests run (tests/background.py):
    `lab up` is a minute or more of podman, debootstrap and SSH waits. Nothing of the unit
    or contract suites touches the lab; SPARKCTL_LAB_BACKGROUND=0 brings it up in the
    fixture instead.

    Also marks where the tests that want the host to themselves end (_AFTER_QUIET); with
    none selected, the molecule scenarios may start at once."""
    quiet = [i for i, item in enumerate(session.items) if _wants_quiet(item)]
    if quiet:
        _AFTER_QUIET.update(item.nodeid for item in session.items[quiet[-1] + 1 :])
    else:
        QUIET_OVER.set()
    if (
        session.config.option.collectonly
        # A collection error ends the session before any test: no lab to bring up (it
        # was brought up and taken down again at once, removing a lab another run used).
        or session.testsfailed
        or not _lab_selected(session)
        or os.environ.get("SPARKCTL_LAB_BACKGROUND") == "0"
        or lab_unavailable()
    ):
        return
    RUNNING["lab"] = Background(_bring_up_lab)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A session that ended before any lab test ran (-x on a unit test, ^C) still takes
    down the lab its background bring-up started."""
    work = RUNNING.pop("lab", None)
    if work is not None and not _LAB_FIXTURE_USED and os.environ.get("SPARKCTL_KEEP_LAB") != "1":
        work.thread.join()
        sparkctl("lab", "down")


_LAB_FIXTURE_USED: list[bool] = []


@pytest.fixture(scope="session")
def lab() -> Iterator[LabSession]:
    """Bring the lab up once for the session and take it down at the end.

    Without root or podman the lab tests are skipped, unless SPARKCTL_REQUIRE_LAB=1
    (set by .ci/run) makes that a failure, so CI can never pass by skipping them.
    SPARKCTL_KEEP_LAB=1 reuses a running lab and leaves it up afterwards, for
    quick iterations; otherwise the session starts from no lab at all. The lab
    comes up beside the unit tests and the molecule scenarios (tests/background.py);
    the lab tests that measure bandwidth wait for the scenarios (quiet_host).
    """
    reason = lab_unavailable()
    if reason:
        if os.environ.get("SPARKCTL_REQUIRE_LAB") == "1":
            pytest.fail(f"lab tests required but {reason}")
        pytest.skip(reason)
    work = RUNNING.get("lab")
    _LAB_FIXTURE_USED.append(True)
    brought: _BroughtUp = work.join() if work is not None else _bring_up_lab()
    if brought.returncode != 0:
        pytest.fail(f"sparkctl lab up failed ({brought.returncode}):\n{brought.stderr}")
    yield LabSession(inventory=inventory.load(SIM_INVENTORY), before=brought.before)
    if os.environ.get("SPARKCTL_KEEP_LAB") != "1":
        sparkctl("lab", "down")


def provision_lab() -> dict[str, object]:
    """`sparkctl provision inventory/sim.ini --json`, asserted successful."""
    import json  # noqa: PLC0415

    proc = sparkctl("provision", str(SIM_INVENTORY), "--json", timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return dict(json.loads(proc.stdout))


@pytest.fixture(scope="session")
def provisioned(lab: LabSession) -> dict[str, object]:
    """The first provision of the session's lab, shared by every module that needs it."""
    return provision_lab()


@pytest.fixture
def snapshot(lab: LabSession) -> Callable[[], dict[str, object]]:
    """Live state of the lab's nodes and switch (tests.labhost.cluster_state), for fault
    tests: the command under test must not change it, the undo must restore it."""
    assert lab.inventory.switch is not None
    nodes = {n.name: n.mgmt_ip for n in lab.inventory.nodes}
    switch = lab.inventory.switch.mgmt_ip
    return lambda: cluster_state(nodes, switch)


def assert_unchanged(before: dict[str, object], after: dict[str, object], what: str) -> None:
    diffs = state_diff(before, after)
    assert not diffs, f"{what} changed the cluster:\n" + "\n".join(diffs[:40])


# ----------------------------------------------------------- sparkctl render
# Valid for the sglang role's key rule (16+ characters of A-Z a-z 0-9 ._~+/=:-),
# so a render that wrote the key would write exactly this.
SENTINEL_KEY = "sentinel-api-key-5f0c2d9b7e"
# The environment each inventory is rendered in: lab.ini (the real cluster's
# example) with the sentinel exported as the API key, which must appear in no
# rendered file; the lab's inventories with NO key in the environment at all.
RENDER_API_KEYS: dict[str, str | None] = {"lab": SENTINEL_KEY, "sim": None, "sim-two-groups": None}


@dataclass(frozen=True)
class Rendered:
    """The output of ``sparkctl.render.render`` for one inventory/NAME.ini."""

    inv: Inventory
    out: Path
    files: tuple[Path, ...]
    state: Path  # SPARKCTL_STATE_DIR of the run

    def read(self, host: str, path: str) -> str:
        """A rendered file by host and its absolute path on that host."""
        target = self.out / host / path.lstrip("/")
        assert target.is_file(), (
            f"{host}: {path} was not rendered; rendered: "
            f"{sorted(str(f.relative_to(self.out)) for f in self.files)}"
        )
        return target.read_text()

    def env(self, host: str, path: str) -> dict[str, str]:
        """A rendered environment file, read by the nccl role's own parser."""
        parsed: dict[str, str] = _nccl_env_filters().nccl_parse_env(self.read(host, path))
        return parsed


@functools.cache
def _nccl_env_filters() -> ModuleType:
    return load_file(
        "nccl_env_filters",
        REPO / "ansible_collections" / "sparkctl" / "spark" / "plugins" / "filter" / "nccl_env.py",
    )


def _render(name: str, base: Path) -> Rendered:
    from sparkctl.render import render  # noqa: PLC0415 -- ansible-runner, only when rendering

    if name not in RENDER_API_KEYS:
        raise KeyError(
            f"no render environment for inventory/{name}.ini: add it to "
            "RENDER_API_KEYS in tests/conftest.py"
        )
    api_key = RENDER_API_KEYS[name]
    path = REPO / "inventory" / f"{name}.ini"
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "AnsibleCollectionFinder has already been configured", UserWarning
        )
        mp.setenv("SPARKCTL_STATE_DIR", str(base / "state"))
        if api_key is None:
            mp.delenv("SPARKCTL_SGLANG_API_KEY", raising=False)
        else:
            mp.setenv("SPARKCTL_SGLANG_API_KEY", api_key)
        files = render(inventory.validate(path), base / "out")
    return Rendered(
        inv=inventory.load(path),
        out=(base / "out").resolve(),
        files=tuple(files),
        state=base / "state",
    )


def _render_shared(name: str, root: Path) -> Rendered:
    """The render of inventory/NAME.ini that every xdist worker of this run shares, in
    ``root`` (the run's temporary directory, above each worker's own): the first worker
    to need it renders it there under a lock, the others wait for the lock and read its
    list of files. A render that failed left no list: the next worker tries again."""
    base = root / f"render-{name}"
    listing = root / f"render-{name}.json"
    with (root / f"render-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not listing.is_file():
            shutil.rmtree(base, ignore_errors=True)
            base.mkdir()
            made = _render(name, base)
            listing.write_text(
                json.dumps([str(f.resolve().relative_to(made.out)) for f in made.files])
            )
            return made
    out = (base / "out").resolve()
    return Rendered(
        inv=inventory.load(REPO / "inventory" / f"{name}.ini"),
        out=out,
        files=tuple(out / f for f in json.loads(listing.read_text())),
        state=base / "state",
    )


@pytest.fixture(scope="session")
def rendered_inventory(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Rendered]:
    """``rendered_inventory("sim")``: inventory/sim.ini rendered once for the whole run.

    A render takes 15-20 s of CPU (playbooks/render.yml through ansible-runner,
    one fork per task and host), and the unit and contract suites read the same
    output: each inventory is rendered on first use, in its environment from
    RENDER_API_KEYS, and shared from then on (tests only read it). Under xdist each
    worker is a session of its own, and the test files that render go to different
    workers: they share one render per inventory (_render_shared), which saved one
    worker 27 s of the first pass's 380.
    """
    done: dict[str, Rendered] = {}

    def get(name: str) -> Rendered:
        if name not in done:
            if os.environ.get("PYTEST_XDIST_WORKER"):
                done[name] = _render_shared(name, tmp_path_factory.getbasetemp().parent)
            else:
                done[name] = _render(name, tmp_path_factory.mktemp(f"render-{name}"))
        return done[name]

    return get
