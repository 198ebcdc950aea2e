"""The nvidia_driver role's GPU module run by Ansible itself (the rest of the role's tests,
which need no Ansible run, are tests/unit/test_nvidia_driver.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.unit.pathload import ansible_playbook
from tests.unit.test_nvidia_driver import HW, ROLE, STANDIN


def test_module_through_ansible_reads_with_the_shared_parser(tmp_path: Path) -> None:
    """As provision runs it: Ansible packs the module with the module_utils it imports,
    the collection's tool_output, and runs it against the lab's nvidia-smi stand-in
    (header CSV, 580 banner)."""
    adhoc = ansible_playbook().with_name("ansible")
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    smi.chmod(0o755)
    (tmp_path / "hardware.json").write_text(json.dumps(HW))
    (tmp_path / "ansible.cfg").write_text("[defaults]\n")
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(tmp_path / "ansible.cfg"),
        ANSIBLE_LIBRARY=str(ROLE.parents[1] / "plugins" / "modules"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        ANSIBLE_HOME=str(tmp_path / "home"),
        SPARKCTL_LAB_HW=str(tmp_path / "hardware.json"),
        SPARKCTL_LAB_SYSFS=str(tmp_path),
        PATH=f"{smi.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    )
    proc = subprocess.run(
        [
            str(adhoc),
            "localhost",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-m",
            "sparkctl.spark.nvidia_gpu_info",
            "-a",
            "node_name=spark1",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result["gpus"][0]["name"] == "NVIDIA GB10"
    assert result["gpus"][0]["compute_cap"] == "12.1"
    assert (result["driver_version"], result["cuda_version"]) == ("580.95.05", "13.0")
