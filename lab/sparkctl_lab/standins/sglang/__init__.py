"""sparkctl's rehearsal-lab stand-in for SGLang (the pinned release, 0.5.17).

The package is named ``sglang`` on purpose: the unit runs ``python3 -m
sglang.launch_server`` (or the launcher's ``runpy.run_module``) with exactly
the arguments of the real server. It is not SGLang and serves no model: it
does the multi-node start-up over real sockets, prints the release's lines
(release.py, each with its source) and serves the release's API with a toy
model. Modules import each other relatively: the package is ``sglang`` on the
lab's nodes and ``sparkctl_lab.standins.sglang`` in sparkctl's tests.
"""

from .version import __version__

__all__ = ["__version__"]
