"""Import stub (the contract venv only, for importing, never for running kernels): triton.

PyPI's triton is a GPU compiler; the contract venv has no GPU and no triton.
SGLang imports triton at module level (sglang/srt/utils/common.py:87 in
0.5.17) and ships its own mock for platforms without one:
``sglang/_triton_stub.py`` (used by sglang/__init__.py on macOS/MPS). This
file installs THAT mock at interpreter start-up, before anything imports
sglang, so every ``import triton`` resolves to the release's own stand-in.
It is loaded by path, because importing ``sglang._triton_stub`` would run
sglang/__init__.py, which imports triton first. Python runs it because the
contract fixture puts this directory on PYTHONPATH (site.py imports
``sitecustomize``).
"""

from __future__ import annotations

# The release's mock builds importlib.machinery.ModuleSpec objects but imports
# only importlib; at start-up nothing has imported the submodule yet.
import importlib.machinery
import importlib.util
from pathlib import Path


def _install_release_triton_mock() -> None:
    spec = importlib.util.find_spec("sglang")  # finds, does not import, the package
    if spec is None or spec.origin is None:
        return
    path = Path(spec.origin).parent / "_triton_stub.py"
    if not path.is_file():
        raise RuntimeError(
            f"{path} is missing: this SGLang release has no triton mock; "
            "tests/contract/stubs needs a triton stub of its own"
        )
    mock_spec = importlib.util.spec_from_file_location("_sparkctl_sglang_triton_stub", path)
    assert mock_spec is not None and mock_spec.loader is not None
    mock = importlib.util.module_from_spec(mock_spec)
    mock_spec.loader.exec_module(mock)
    mock.install()  # a no-op where a real triton is importable


_install_release_triton_mock()
