"""sparkctl's rehearsal-lab stand-in for SGLang.

The package is named ``sglang`` on purpose: the unit runs ``python3 -m
sglang.launch_server`` with exactly the arguments of the real server (see
launch_server.py). It is not SGLang and serves no model.
"""

from .version import __version__

__all__ = ["__version__"]
