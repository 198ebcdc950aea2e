"""The lab's only way to podman: every call goes through :class:`Podman`.

It points podman at the project-owned ``containers.conf`` (runc, lowered
ulimits) through ``CONTAINERS_CONF`` and turns failures into
:class:`~sparkctl.errors.SparkctlError` with the lab exit code.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.proc import require_tool, run

ASSETS = Path(__file__).resolve().parent / "assets"
CONTAINERS_CONF = ASSETS / "containers.conf"


class Podman:
    def __init__(self) -> None:
        self.binary = require_tool("podman", package="podman runc")
        self.env = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}

    def __call__(
        self,
        *args: str,
        check: bool = True,
        input_text: str | None = None,
        timeout: float | None = 300,
    ) -> subprocess.CompletedProcess[str]:
        return run(
            [self.binary, *args],
            check=check,
            input_text=input_text,
            env=self.env,
            timeout=timeout,
            code=ExitCode.LAB,
            what=f"podman {args[0]}",
        )

    def image_exists(self, ref: str) -> bool:
        return self("image", "exists", ref, check=False).returncode == 0

    def network_exists(self, name: str) -> bool:
        return self("network", "exists", name, check=False).returncode == 0

    def network_interface(self, name: str) -> str:
        """The host-side bridge of podman network ``name`` (``network_interface``)."""
        data = json.loads(self("network", "inspect", name).stdout or "[]")
        bridge = data[0].get("network_interface") if isinstance(data, list) and data else None
        if not isinstance(bridge, str) or not bridge:
            raise SparkctlError(f"podman network {name} names no bridge interface", ExitCode.LAB)
        return bridge

    def containers(self, label: str) -> list[dict[str, Any]]:
        out = self("ps", "-a", "--filter", f"label={label}", "--format", "json").stdout
        data = json.loads(out or "[]")
        if not isinstance(data, list):
            raise SparkctlError("podman ps returned unexpected JSON", ExitCode.LAB)
        return data

    def inspect(self, name: str) -> dict[str, Any] | None:
        proc = self("container", "inspect", name, check=False)
        if proc.returncode != 0:
            return None
        data = json.loads(proc.stdout)
        return data[0] if data else None

    def pid(self, name: str) -> int:
        info = self.inspect(name)
        if info is None or not info["State"]["Running"]:
            raise SparkctlError(
                f"lab container {name} is not running",
                ExitCode.LAB,
                hint="sparkctl lab down && sparkctl lab up",
            )
        return int(info["State"]["Pid"])

    def init(self, name: str) -> int:
        """``podman init``: the stopped container's namespaces made, its PID 1 not started
        yet (runc's init process waits in them); the pid of that process."""
        self("init", name)
        info = self.inspect(name)
        pid = int(info["State"]["Pid"]) if info is not None else 0
        if pid <= 0:
            raise SparkctlError(
                f"lab container {name} has no process after podman init", ExitCode.LAB
            )
        return pid

    def exec(
        self,
        name: str,
        cmd: Sequence[str],
        *,
        check: bool = True,
        input_text: str | None = None,
        timeout: float | None = 120,
    ) -> subprocess.CompletedProcess[str]:
        args = ["exec", "-i", name, *cmd] if input_text is not None else ["exec", name, *cmd]
        return self(*args, check=check, input_text=input_text, timeout=timeout)

    def write_file(self, name: str, path: str, content: str, mode: str = "0644") -> None:
        """Write ``content`` to ``path`` inside container ``name`` (parents created)."""
        self.exec(
            name,
            [
                "sh",
                "-c",
                'mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"',
                "sh",
                path,
                mode,
            ],
            input_text=content,
        )
