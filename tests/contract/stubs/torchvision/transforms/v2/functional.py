"""Import stub (the contract venv only, for importing): torchvision.transforms.v2.functional.

See torchvision/__init__.py here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchvision.transforms import InterpolationMode

__all__ = ["InterpolationMode"]


def __getattr__(name: str) -> Callable[..., Any]:
    """Any other function of this module: importable, fails when called."""
    if name.startswith("__"):
        raise AttributeError(name)

    def stub(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{__name__}.{name} is an import stub (tests/contract/stubs)")

    stub.__name__ = name
    return stub
