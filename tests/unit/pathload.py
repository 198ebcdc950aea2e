"""Where the collection is, and how tests import its plugins or a stand-in script.

The collection's plugins are Python modules under ``ansible_collections.sparkctl.spark``
(the checkout's root is on sys.path, as site-packages is for an installed wheel), so
tests import them by that name, as Ansible does; a file that is not in a package (a
role's files/ script, a stand-in) is loaded from its path, registered in sys.modules so
that dataclasses and pickling inside it resolve their own module.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
# The Ansible collection: roles, modules, module_utils, filters and the action plugin.
COLLECTION = REPO / "ansible_collections" / "sparkctl" / "spark"
ROLES = COLLECTION / "roles"
PLUGINS = COLLECTION / "plugins"


def plugin(kind: str, name: str) -> ModuleType:
    """The collection's plugin ``kind`` ("modules", "filter", "action", "module_utils")
    named ``name``, imported as Ansible imports it (sparkctl.collection)."""
    from sparkctl import collection  # noqa: PLC0415

    return collection.plugin(kind, name)


def load_file(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# Runs a module file as a script, as Ansible's wrapper would (its module_utils import
# resolves through the checkout on sys.path).
_RUN_MODULE = (
    "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def module_command(module: Path, *args: str) -> list[str]:
    """argv that runs ``module`` (one of the collection's plugins/modules/*.py) with
    ``args`` as Ansible's wrapper would."""
    return [sys.executable, "-c", _RUN_MODULE, str(module), *args]


def ansible_playbook() -> Path:
    """The ansible-playbook beside this Python (the venv's), else on PATH; skips without one."""
    import shutil  # noqa: PLC0415
    import sys  # noqa: PLC0415

    import pytest  # noqa: PLC0415

    exe = Path(sys.executable).with_name("ansible-playbook")
    if exe.exists():
        return exe
    found = shutil.which("ansible-playbook")
    if found is None:
        pytest.skip("ansible-playbook not installed")
    return Path(found)
