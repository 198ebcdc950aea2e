#!/usr/bin/python
"""Ansible module nvidia_nvcc_info: nvcc's version and the GPU targets it can build.

nvidia-smi's "CUDA Version" is what the DRIVER supports; whether CUDA code
for the GB10 can be built here is the compiler's business: its release and
its `--list-gpu-arch` (virtual architectures, compute_XY) and
`--list-gpu-code` (real ones, sm_XY). They are read by sparkctl's one parser
of tool output (the collection's module_utils tool_output); unit tests in
tests/unit/test_nvidia_driver.py and test_tool_output.py on outputs under
tests/fixtures/nvcc, never shell in a task.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.tool_output import (
    ToolOutputError,
    nvcc_targets,
    nvcc_version,
)

DOCUMENTATION = r"""
---
module: nvidia_nvcc_info
short_description: nvcc's version and the GPU architectures and codes it lists
description:
  - Runs C(nvcc --version), C(nvcc --list-gpu-arch) and C(nvcc --list-gpu-code)
    and returns the release, the full version and both lists.
  - Fails with a message naming the node when nvcc is missing or fails.
  - Reads only; check mode is supported.
options:
  nvcc:
    description: Path of nvcc (DGX OS installs it in /usr/local/cuda/bin, not on PATH).
    type: path
    required: true
  node_name:
    description: Name of the node in messages; the host name when not given.
    type: str
author: sparkctl developers
"""

EXAMPLES = r"""
- name: Ask nvcc for its version and targets
  nvidia_nvcc_info:
    nvcc: /usr/local/cuda/bin/nvcc
    node_name: "{{ inventory_hostname }}"
  register: nvcc
"""

RETURN = r"""
release:
  description: The "release" of `nvcc --version` (major.minor).
  type: str
  returned: success
  sample: "13.0"
version:
  description: The full version (the V... of `nvcc --version`).
  type: str
  returned: success
  sample: 13.0.88
gpu_arch:
  description: Virtual architectures nvcc can target (--list-gpu-arch), in its order.
  type: list
  elements: str
  returned: success
  sample: [compute_75, compute_80, compute_120, compute_121]
gpu_code:
  description: Real architectures nvcc can build code for (--list-gpu-code), in its order.
  type: list
  elements: str
  returned: success
  sample: [sm_75, sm_80, sm_120, sm_121]
"""

RunCommand = Callable[[list[str]], tuple[int, str, str]]


class NvccError(Exception):
    """What went wrong, worded for the person who runs the playbook."""


def nvcc_info(nvcc: str, node: str, run: RunCommand) -> dict[str, Any]:
    def ask(*args: str) -> str:
        try:
            rc, out, err = run([nvcc, *args])
        except OSError as exc:
            raise NvccError(
                f"cannot run {nvcc} on {node}: {exc}; the CUDA toolkit is missing or elsewhere "
                "(install cuda-toolkit-13-0, or set nvidia_driver_nvcc)"
            ) from exc
        if rc != 0:
            said = " ".join((err or out).split())[:300] or "no output"
            raise NvccError(f"{nvcc} {' '.join(args)} failed on {node} (exit {rc}): {said}")
        return out

    try:
        info: dict[str, Any] = dict(nvcc_version(ask("--version")))
        info["gpu_arch"] = nvcc_targets(ask("--list-gpu-arch"))
        info["gpu_code"] = nvcc_targets(ask("--list-gpu-code"))
    except ToolOutputError as exc:
        raise NvccError(f"{nvcc} on {node}: {exc}") from exc
    return info


def main() -> None:
    module = AnsibleModule(
        argument_spec={"nvcc": {"type": "path", "required": True}, "node_name": {"type": "str"}},
        supports_check_mode=True,
    )
    node = module.params["node_name"] or socket.gethostname()

    def run(argv: list[str]) -> tuple[int, str, str]:
        rc, out, err = module.run_command(
            argv, environ_update={"LC_ALL": "C"}, handle_exceptions=False
        )
        return rc, out, err

    try:
        result = nvcc_info(module.params["nvcc"], node, run)
    except NvccError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
