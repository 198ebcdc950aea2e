"""The filter ``sparkctl_inventory_problems``: every inventory rule of ``sparkctl
inventory check``, applied by the preflight play.

It is the same code the CLI runs, :mod:`sparkctl.rules`, imported from the
controller's Python: sparkctl starts ansible-playbook from its own environment, so
the package (and its schema library, jsonschema) is there. Running the playbooks
with an ansible-playbook of another environment needs ``pip install sparkctl`` in
that environment first; without it this import fails and the play stops before
any task runs, which is the safe way to fail.
"""

from __future__ import annotations

from sparkctl.rules.filter import FilterModule

__all__ = ["FilterModule"]
