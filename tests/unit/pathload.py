"""Import a role's module, filter plugin or stand-in script by its path.

Role code is not a Python package (Ansible finds it by directory), so the unit
tests load it from the file; registering it in sys.modules lets dataclasses
and pickling inside it resolve their own module.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_file(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


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
