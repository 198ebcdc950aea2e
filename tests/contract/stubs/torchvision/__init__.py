"""Import stub (the contract venv only, for importing): torchvision.

PyPI's torchvision wheels for x86_64 are CUDA builds: their _C.so needs libtorch_cuda.so and
libc10_cuda.so, which the CPU torch of the contract venv does not have, so the real
package cannot even be imported there.

Imported by sglang/srt/utils/common.py:94 (``from torchvision.io import decode_jpeg``)
and, because transformers then finds torchvision, by transformers' image utilities
(transformers/image_utils.py, image_processing_utils.py) when sglang registers its image
processors at import time (sglang/srt/configs/utils.py:18). Only the names those modules
import at module level exist; every function raises when called.
"""

from __future__ import annotations

__version__ = "0.0.0+sparkctl.stub"

from torchvision import io, transforms

__all__ = ["io", "transforms"]
