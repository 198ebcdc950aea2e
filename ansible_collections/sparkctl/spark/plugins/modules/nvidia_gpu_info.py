#!/usr/bin/python
"""Ansible module nvidia_gpu_info: GPUs, driver and CUDA version from nvidia-smi.

nvidia-smi's output is read by sparkctl's one parser of node tool output
(the collection's module_utils tool_output; tests/unit/test_tool_output.py
on real outputs): the CSV by its header, the banner in both its spellings.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sparkctl.spark.plugins.module_utils.tool_output import (
    ToolOutputError,
    nvidia_smi_banner,
    nvidia_smi_csv,
)

DOCUMENTATION = r"""
---
module: nvidia_gpu_info
short_description: GPUs, driver version and CUDA version as nvidia-smi reports them
description:
  - Runs C(nvidia-smi --query-gpu=name,driver_version,compute_cap,pci.bus_id
    --format=csv) for the GPUs, read by the CSV header, and plain C(nvidia-smi) for the CUDA
    version in its header, and returns both as structured data.
  - Fails with a message naming the node when nvidia-smi is missing or exits
    non-zero, for example when the driver is not loaded (exit 9).
  - Reads only; check mode is supported.
options:
  nvidia_smi:
    description: Path of nvidia-smi; looked up on PATH (and the sbin directories) when not given.
    type: path
  node_name:
    description: Name of the node in messages; the host name when not given.
    type: str
author: sparkctl developers
"""

EXAMPLES = r"""
- name: Ask nvidia-smi for GPU, driver and CUDA
  nvidia_gpu_info:
    node_name: "{{ inventory_hostname }}"
  register: gpu
"""

RETURN = r"""
gpus:
  description: One entry per GPU, in nvidia-smi's order; null where nvidia-smi prints [N/A].
  type: list
  elements: dict
  returned: success
  sample:
    - {index: 0, name: NVIDIA GB10, driver_version: 580.95.05, compute_cap: "12.1",
       pci_bus_id: "0000000F:01:00.0"}
gpu_count:
  description: Number of GPUs listed.
  type: int
  returned: success
  sample: 1
driver_version:
  description: Version of the loaded driver (of the first GPU).
  type: str
  returned: success
  sample: 580.95.05
cuda_version:
  description: >-
    Highest CUDA version the driver supports ("CUDA Version" in the header;
    "CUDA UMD Version" from driver R610 on).
  type: str
  returned: success
  sample: "13.0"
nvidia_smi:
  description: The nvidia-smi that was run.
  type: str
  returned: success
  sample: /usr/bin/nvidia-smi
"""

QUERY_FIELDS = ("name", "driver_version", "compute_cap", "pci.bus_id")

RunCommand = Callable[[list[str]], tuple[int, str, str]]


class GpuInfoError(Exception):
    """What went wrong, worded for the person who runs the playbook."""


def gpus_of(text: str) -> list[dict[str, Any]]:
    """The GPUs of the query's CSV, read by its header; None where nvidia-smi prints [N/A]."""
    if not text.strip():
        return []  # verify judges a node without GPUs
    try:
        rows = nvidia_smi_csv(text, list(QUERY_FIELDS))
    except ToolOutputError as exc:
        raise GpuInfoError(f"unexpected nvidia-smi --query-gpu output: {exc}") from exc
    return [
        {
            "index": i,
            "name": row["name"],
            "driver_version": row["driver_version"],
            "compute_cap": row["compute_cap"],
            "pci_bus_id": row["pci.bus_id"],
        }
        for i, row in enumerate(rows)
    ]


def first_words(stdout: str, stderr: str, limit: int = 400) -> str:
    """nvidia-smi's own explanation, on one line (it prints errors on stdout)."""
    text = " ".join(line.strip() for line in (stdout + "\n" + stderr).splitlines() if line.strip())
    text = text or "no output"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def gpu_info(nvidia_smi: str | None, node: str, run: RunCommand) -> dict[str, Any]:
    """Run nvidia-smi twice and combine what it says; GpuInfoError on any failure."""
    if not nvidia_smi:
        raise GpuInfoError(
            f"nvidia-smi not found on {node}: the NVIDIA driver is not installed "
            "(looked on PATH and in the sbin directories)"
        )
    query = [nvidia_smi, "--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv"]
    try:
        rc, out, err = run(query)
    except OSError as exc:
        raise GpuInfoError(f"cannot run {nvidia_smi} on {node}: {exc}") from exc
    if rc != 0:
        raise GpuInfoError(
            f"no GPU answers on {node}: {first_words(out, err)} (nvidia-smi exit {rc})"
        )
    gpus = gpus_of(out)
    rc, header, err = run([nvidia_smi])
    if rc != 0:
        raise GpuInfoError(
            f"no GPU answers on {node}: {first_words(header, err)} (nvidia-smi exit {rc})"
        )
    versions = nvidia_smi_banner(header)
    if versions["cuda_version"] is None:
        raise GpuInfoError(
            f"nvidia-smi on {node} shows no CUDA version in its header: "
            f"{first_words(header, '', 200)}"
        )
    driver = gpus[0]["driver_version"] if gpus else versions["driver_version"]
    if driver is None:
        raise GpuInfoError(f"nvidia-smi on {node} reports no driver version")
    return {
        "gpus": gpus,
        "gpu_count": len(gpus),
        "driver_version": driver,
        "cuda_version": versions["cuda_version"],
        "nvidia_smi": nvidia_smi,
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi": {"type": "path"},
            "node_name": {"type": "str"},
        },
        supports_check_mode=True,
    )
    node = module.params["node_name"] or socket.gethostname()
    nvidia_smi = module.params["nvidia_smi"] or module.get_bin_path("nvidia-smi")

    def run(argv: list[str]) -> tuple[int, str, str]:
        # LC_ALL=C: the header labels are matched literally.
        rc, out, err = module.run_command(
            argv, environ_update={"LC_ALL": "C"}, handle_exceptions=False
        )
        return rc, out, err

    try:
        result = gpu_info(nvidia_smi, node, run)
    except GpuInfoError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
