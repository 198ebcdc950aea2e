"""Where sparkctl finds its playbooks and roles, and where it keeps state.

Playbooks and the example inventories are shipped inside the wheel
(``sparkctl/_data``), and the Ansible collection ``sparkctl.spark`` (the roles and
their plugins) beside the package, as ``ansible_collections/sparkctl/spark`` in
site-packages. When sparkctl runs from a checkout, the checkout's ``playbooks/``
and ``ansible_collections/`` are used instead, so edits take effect without
reinstalling.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sparkctl.errors import ExitCode, SparkctlError

_PACKAGE_DIR = Path(__file__).resolve().parent


# The Ansible collection's place under a directory of Python's path: the checkout, or
# the site-packages a wheel installed into (where Ansible finds it by scanning sys.path,
# and Python imports its module_utils as ansible_collections.sparkctl.spark...).
COLLECTION = Path("ansible_collections", "sparkctl", "spark")


def _checkout() -> Path | None:
    checkout = _PACKAGE_DIR.parent
    if (
        (checkout / "playbooks").is_dir()
        and (checkout / COLLECTION / "galaxy.yml").is_file()
        and (checkout / "pyproject.toml").is_file()
    ):
        return checkout
    return None


def data_dir() -> Path:
    """The directory holding ``playbooks/``, ``inventory/`` and ``ansible.cfg``."""
    return _checkout() or _PACKAGE_DIR / "_data"


def collection_dir() -> Path:
    """The sparkctl.spark collection: roles and plugins."""
    return (_checkout() or _PACKAGE_DIR.parent) / COLLECTION


def collections_path() -> Path:
    """The directory to give Ansible as ANSIBLE_COLLECTIONS_PATH (it holds ansible_collections/)."""
    return collection_dir().parents[2]


def playbooks_dir() -> Path:
    return data_dir() / "playbooks"


def roles_dir() -> Path:
    return collection_dir() / "roles"


def default_sim_inventory() -> Path:
    """The inventory that describes the rehearsal lab (``inventory/sim.ini``)."""
    return data_dir() / "inventory" / "sim.ini"


def state_dir() -> Path:
    """Per-user state: lab keys, results, the last good validation run.

    ``SPARKCTL_STATE_DIR`` overrides it (the inventory sees the same directory as
    ``{{ sparkctl_state_dir }}``: :func:`controller_vars`).
    """
    env = os.environ.get("SPARKCTL_STATE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".local" / "state" / "sparkctl"


# Variables sparkctl itself sets for every host, from the controller: an inventory may
# refer to them ({{ sparkctl_state_dir }}) but not set them, and never reads the
# controller's environment with a lookup (values are data: sparkctl/rules/data.py).
# The runner passes the same values to every playbook as extra vars.
CONTROLLER_VARS = (
    "sparkctl_state_dir",
    "sparkctl_pip_cert",
    "sparkctl_python",
    "sparkctl_inventory",
)


def controller_vars(inventory: Path | None = None) -> dict[str, str]:
    """The controller's variables: the state directory, the CA bundle the controller's
    pip trusts (``PIP_CERT``, "" when unset; a lab's nodes install through the
    controller's network, behind the same TLS-inspecting proxy), the Python sparkctl
    runs in and the absolute path of ``inventory`` ("" when none): what a service on
    the controller runs sparkctl with (roles/sglang_watchdog)."""
    return {
        "sparkctl_state_dir": str(state_dir()),
        "sparkctl_pip_cert": os.environ.get("PIP_CERT", ""),
        "sparkctl_python": sys.executable,
        "sparkctl_inventory": str(inventory.resolve()) if inventory is not None else "",
    }


def facts_dir(cluster: str) -> Path:
    """Ansible's fact cache for one cluster (the lab and a real cluster both name
    their hosts spark1..4, and one must never be handed the other's facts)."""
    return state_dir() / "facts" / cluster


def write_atomic(path: Path, text: str) -> None:
    """``text`` into ``path`` whole: a temporary file beside it (its directory made if need
    be), then renamed over it, so a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def baseline_path(value: str, last_good: Path, *, what: str, hint: str) -> Path:
    """A ``--baseline`` value: ``last-good`` (the run ``last_good`` links to), or a run's
    directory or report file. ``what`` names the runs (``run``, ``bench``) in the error
    (exit 2) when there is none; ``hint`` says how a run becomes last-good."""
    if value == "last-good":
        if not last_good.exists():
            raise SparkctlError(
                f"no last-good {what} for {last_good.parent.name} yet ({last_good})",
                ExitCode.BAD_INPUT,
                hint=hint,
            )
        return last_good.resolve()
    path = Path(value).expanduser()
    if not path.exists():
        raise SparkctlError(
            f"{path}: no such baseline (give a {what} directory, its report.json, or last-good)",
            ExitCode.BAD_INPUT,
        )
    return path


def point_link(link: Path, target: str) -> None:
    """``link`` (a symlink) pointed at ``target`` at once: a reader sees the old target or
    the new one, never none."""
    tmp = link.with_name(f".{link.name}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    tmp.replace(link)
