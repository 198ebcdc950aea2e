"""A validation run's report, one module per concern.

- :mod:`~sparkctl.report.model`: the data (``report.json`` as dataclasses);
- :mod:`~sparkctl.report.io`: writing ``report.json`` and ``report.html``
  into a results directory, and reading a report back (with its shape check);
- :mod:`~sparkctl.report.baseline`: comparison with the last good run;
- :mod:`~sparkctl.report.html`: ``report.html`` with its plots;
- :mod:`~sparkctl.report.numbers`: sizes and bandwidths as people read them.
- :mod:`~sparkctl.report.soak` and :mod:`~sparkctl.report.soak_html`: a burn-in
  (``validate --soak``): ``soak.json`` and ``soak.html``.

:func:`write`, :func:`load`, :func:`compare` and :func:`render_html` are
re-exported here, so ``report.write(...)`` reads as before.
"""

from __future__ import annotations

from sparkctl.report.baseline import compare
from sparkctl.report.html import render_html
from sparkctl.report.io import REPORT_HTML, REPORT_JSON, load, write

__all__ = ["REPORT_HTML", "REPORT_JSON", "compare", "load", "render_html", "write"]
