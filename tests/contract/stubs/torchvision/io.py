"""Import stub (the contract venv only, for importing): torchvision.io.

See torchvision/__init__.py here. ImageReadMode has torchvision's values.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any


class ImageReadMode(enum.Enum):
    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4


def __getattr__(name: str) -> Callable[..., Any]:
    """Any other function of this module: importable, fails when called."""
    if name.startswith("__"):
        raise AttributeError(name)

    def stub(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{__name__}.{name} is an import stub (tests/contract/stubs)")

    stub.__name__ = name
    return stub
