"""An SGLang rank's start-up, as its log tells it: a catalogue of data and a reader.

- ``catalogue.yml``: the start-up phases and the lines that announce each, the lines
  that end start-up, the known failures (what each means and what to change) and the
  silences that are hangs; every pattern with its cited sources and real example lines.
  A reviewer reads and extends it without reading the parser.
- :mod:`.catalogue`: the types (:class:`~.catalogue.Phase`, ``Signature``, ``Pattern``,
  ``Source``, ``Rule``) and the one reading of that file, its shape checked.
- :mod:`.reader`: the parser over log lines (``phase_of``, ``match``, ``RankLog``,
  ``hang_signature`` ...), what ``sparkctl serve up`` uses.

NCCL's own lines (which transport, which version) are read by :mod:`sparkctl.nccl_parse`,
from its own small data file beside it; the reader asks it. This ``__init__`` imports
nothing: nccl_parse takes the types and the loader from :mod:`.catalogue`, and the reader
imports nccl_parse, so importing the reader here would make a cycle.
"""
