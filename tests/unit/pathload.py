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
