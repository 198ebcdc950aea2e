# What a role's module imports as ansible.module_utils.sparkctl_tool_output is
# sparkctl/tool_output.py (roles/cluster_defaults/module_utils links to it), so
# the modules' calls into it are checked against its signatures.
from sparkctl.tool_output import *  # noqa: F403 - the whole module, as the link gives it
