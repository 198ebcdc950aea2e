"""How a role's filter plugin gets sparkctl's one parser of node tool output.

Modules import :mod:`sparkctl.tool_output` as
``ansible.module_utils.sparkctl_tool_output``: cluster_defaults' module_utils
has a link to it, which Ansible packs into the module it sends to a node. A
filter plugin runs on the controller, where Ansible offers a role's
module_utils to no plugin, and a role must not need the sparkctl package
there; so a filter loads that same link,
``roles/cluster_defaults/module_utils/sparkctl_tool_output.py``, by its path.

This file is that loader, the only copy of it. Each role whose filters read
tool output has a link to it beside them,
``roles/<role>/filter_plugins/sparkctl_tool_output_loader.py`` (made like
cluster_defaults' module_utils link; tests/unit/test_role_links.py checks
where every link points), and a filter runs it by that path::

    TOOL_OUTPUT = run_path(str(Path(__file__).with_name(
        "sparkctl_tool_output_loader.py")))["tool_output"](__file__)

It finds cluster_defaults beside the filter's own role, so it works from a
checkout and from the wheel (where the links are copies) alike, and it loads
the parser once per process under the name ``sparkctl_tool_output``: every
filter gets the same module and the same ``ToolOutputError``.

Ansible loads every ``.py`` in a filter_plugins directory as a filter plugin,
this one too: its :class:`FilterModule` has no filters. Standard library only.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

NAME = "sparkctl_tool_output"


def tool_output(plugin_file: str) -> ModuleType:
    """sparkctl/tool_output.py for the filter plugin at ``plugin_file``, through the link
    in cluster_defaults' module_utils beside that plugin's role."""
    module = sys.modules.get(NAME)
    if module is not None:
        return module
    # The plugin's path as Ansible found it, not resolved: a filter that is itself a
    # link (as preflight's is) still has its role's cluster_defaults beside it.
    roles = Path(plugin_file).absolute().parents[2]
    path = roles / "cluster_defaults" / "module_utils" / f"{NAME}.py"
    spec = importlib.util.spec_from_file_location(NAME, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise ImportError(
            f"cannot load {path} (sparkctl's parser of node tool output; "
            "every sparkctl role depends on cluster_defaults, beside it)"
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[NAME]
        raise
    return module


class FilterModule:
    """Ansible loads this file as a filter plugin too: it provides none."""

    def filters(self) -> dict[str, Any]:
        return {}
