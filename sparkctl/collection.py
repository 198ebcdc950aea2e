"""The one route from sparkctl's Python to the Ansible collection's.

sparkctl and the roles read node tool output with one parser, the collection's
module_utils ``tool_output``, and serve judges a rank's firewall with the sglang role's
own filter. Both are Python modules of the collection ``sparkctl.spark``, which lives
in ``ansible_collections/sparkctl/spark`` beside the package (the checkout, or the
site-packages a wheel installed into; :mod:`sparkctl.paths`).

They are imported by their collection names, as Ansible imports them, through
ansible-core's collection finder: this module installs it (its public
``init_plugin_loader``) before anything of ``ansible_collections`` is imported, so
every import in this process, sparkctl's and Ansible's alike (an inventory load),
goes through the one finder, which refuses a collection package Python's own import
system loaded before it. It puts this sparkctl's collection first on the finder's path (as
:mod:`sparkctl.runner` does for ansible-playbook with ``ANSIBLE_COLLECTIONS_PATH``), so
a stale copy under ``~/.ansible/collections`` is never the one imported.

Import ``tool_output`` and ``tp_groups`` (the TP groups, which the inventory rules and
the sglang role's filter both use) from here; :func:`plugin` gives any other plugin
module.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from sparkctl.paths import collections_path

PACKAGE = "ansible_collections.sparkctl.spark.plugins"

# An unparsable inventory must be an error, not a warning and an empty inventory
# (sparkctl.inventory): read when ansible.constants is first imported, just below.
os.environ.setdefault("ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED", "True")
os.environ.setdefault("ANSIBLE_INVENTORY_UNPARSED_WARNING", "False")

from ansible.plugins.loader import init_plugin_loader  # noqa: E402
from ansible.utils.collection_loader import AnsibleCollectionConfig  # noqa: E402

# Once per process (this module is imported once). Inside ansible-playbook (the
# preflight filter imports sparkctl.rules, which imports this) Ansible's own finder is
# in place already, with the collection on its path: it is the one to import through.
if AnsibleCollectionConfig.collection_finder is None:
    init_plugin_loader([str(collections_path())])

from ansible_collections.sparkctl.spark.plugins.module_utils import (  # noqa: E402
    model_memory,
    tool_output,
    tp_groups,
)

__all__ = ["PACKAGE", "model_memory", "plugin", "tool_output", "tp_groups"]


def plugin(kind: str, name: str) -> ModuleType:
    """The collection's plugin module ``kind`` ("filter", "modules", "action",
    "module_utils") named ``name``."""
    return importlib.import_module(f"{PACKAGE}.{kind}.{name}")
