"""The command groups of ``sparkctl``, one thin module each over the typed core, assembled
into the root group by :mod:`sparkctl.cli` (as molecule keeps one module per command)."""
