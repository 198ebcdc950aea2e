#!/usr/bin/python
"""Ansible module nvidia_nvcc_info: nvcc's version and the GPU targets it can build.

nvidia-smi's "CUDA Version" is what the DRIVER supports; whether CUDA code
for the GB10 can be built here is the compiler's business: its release and
its `--list-gpu-arch` (virtual architectures, compute_XY) and
`--list-gpu-code` (real ones, sm_XY). Parsing lives here with unit tests
(tests/unit/test_nvidia_driver.py on outputs under tests/fixtures/nvcc),
never in shell in a task.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from typing import Any

from ansible.module_utils.basic import AnsibleModule

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

# "Cuda compilation tools, release 13.0, V13.0.88"
_VERSION = re.compile(r"release ([0-9]+\.[0-9]+), V([0-9]+(?:\.[0-9]+)*)")
# compute_121, sm_121, and the arch-specific / family forms (sm_121a, sm_100f).
_TARGET = re.compile(r"^(?:compute|sm|lto)_[0-9]+[a-z]?$")


class NvccError(Exception):
    """What went wrong, worded for the person who runs the playbook."""


def parse_version(text: str) -> dict[str, str]:
    """`nvcc --version` -> {release, version}; NvccError when the release line is missing."""
    match = _VERSION.search(text)
    if not match:
        raise NvccError(f"no 'release X.Y, VX.Y.Z' line in nvcc --version output {text.strip()!r}")
    return {"release": match.group(1), "version": match.group(2)}


def parse_targets(text: str) -> list[str]:
    """`nvcc --list-gpu-arch` / `--list-gpu-code`: one target per line."""
    targets = [line.strip() for line in text.splitlines() if line.strip()]
    bad = [t for t in targets if not _TARGET.match(t)]
    if bad:
        raise NvccError(f"unexpected lines in nvcc's target list: {', '.join(bad[:3])}")
    return targets


def nvcc_info(nvcc: str, node: str, run: RunCommand) -> dict[str, Any]:
    def ask(*args: str) -> str:
        try:
            rc, out, err = run([nvcc, *args])
        except OSError as exc:
            raise NvccError(
                f"cannot run {nvcc} on {node}: {exc}; the CUDA toolkit is missing or elsewhere "
                "(install cuda-toolkit-13-0, or set nvidia_driver_nvcc)") from exc
        if rc != 0:
            said = " ".join((err or out).split())[:300] or "no output"
            raise NvccError(f"{nvcc} {' '.join(args)} failed on {node} (exit {rc}): {said}")
        return out

    info: dict[str, Any] = parse_version(ask("--version"))
    info["gpu_arch"] = parse_targets(ask("--list-gpu-arch"))
    info["gpu_code"] = parse_targets(ask("--list-gpu-code"))
    return info


def main() -> None:
    module = AnsibleModule(
        argument_spec={"nvcc": {"type": "path", "required": True}, "node_name": {"type": "str"}},
        supports_check_mode=True,
    )
    node = module.params["node_name"] or socket.gethostname()

    def run(argv: list[str]) -> tuple[int, str, str]:
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"},
                                          handle_exceptions=False)
        return rc, out, err

    try:
        result = nvcc_info(module.params["nvcc"], node, run)
    except NvccError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
