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

from sparkctl import tool_output

# Role modules import sparkctl's one parser of tool output as Ansible module_utils
# (roles/cluster_defaults/module_utils/sparkctl_tool_output.py, a link to
# sparkctl/tool_output.py); loaded from their files here, they find the same code
# under that name.
sys.modules.setdefault("ansible.module_utils.sparkctl_tool_output", tool_output)


def load_file(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# Runs a role's module file as a script, as Ansible's wrapper would, with
# sparkctl's tool_output under its module_utils name (the pytest process's own
# alias above does not reach a child process).
_RUN_MODULE = (
    "import runpy, sys; from sparkctl import tool_output; "
    "sys.modules['ansible.module_utils.sparkctl_tool_output'] = tool_output; "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def module_command(module: Path, *args: str) -> list[str]:
    """argv that runs ``module`` (a role's library/*.py) with ``args`` as Ansible's wrapper
    would, its module_utils import resolved to sparkctl.tool_output."""
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
