"""The filter ``sparkctl_inventory_problems``: every inventory rule of ``sparkctl
inventory check``, applied by the preflight play.

It is the same code the CLI runs, :mod:`sparkctl.rules`, imported from the
controller's Python: sparkctl starts ansible-playbook from its own environment, so
the package (and its schema library, jsonschema) is there. Running the playbooks
with an ansible-playbook of another environment needs ``pip install sparkctl`` in
that environment first; without it the filter fails when the preflight play calls
it, before any task touches a host, which is the safe way to fail.

The import waits until the filter is called. ansible-core loads every filter file of
a collection whenever a template names any of its filters (Jinja2Loader walks the
collection's plugins/filter package, ansible/plugins/loader.py), in every worker
process it forks, so an import here would be paid by every render and provision
task of every host: the rules and jsonschema cost about 90 ms a time.
"""

from __future__ import annotations

from typing import Any


def sparkctl_inventory_problems(*args: Any, **kwargs: Any) -> Any:
    from sparkctl.rules.filter import FilterModule as _Rules  # noqa: PLC0415

    return _Rules().filters()["sparkctl_inventory_problems"](*args, **kwargs)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"sparkctl_inventory_problems": sparkctl_inventory_problems}
