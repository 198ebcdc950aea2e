"""sparkctl: provision, validate and serve a DGX Spark cluster, and rehearse it in a lab."""

from __future__ import annotations

__version__ = "0.1.0"
