"""Import stub (the contract venv only, for importing): torchvision.transforms.

See torchvision/__init__.py here. InterpolationMode has torchvision's values.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def __getattr__(name: str) -> Callable[..., Any]:
    """Any other function of this module: importable, fails when called."""
    if name.startswith("__"):
        raise AttributeError(name)

    def stub(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{__name__}.{name} is an import stub (tests/contract/stubs)")

    stub.__name__ = name
    return stub
