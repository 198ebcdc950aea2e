"""sparkctl: provision, validate and serve a DGX Spark cluster.

Its rehearsal lab is a distribution of its own (sparkctl-lab, lab/ in the checkout),
which plugs ``sparkctl lab`` in; nothing here imports it.
"""

from __future__ import annotations

__version__ = "0.2.0"
