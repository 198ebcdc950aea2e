"""Files written into a lab node (a podman container) in one ``podman exec``.

The stand-ins (:mod:`sparkctl_lab.standins`) dress nodes with these, and the
lab's image registry (:mod:`sparkctl_lab.registry`) moves tags on running nodes
with them; both use this module, neither the other's.
"""

from __future__ import annotations

import base64
import io
import tarfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkctl.errors import ExitCode, SparkctlError

if TYPE_CHECKING:
    from sparkctl_lab.podman import Podman


@dataclass(frozen=True)
class NodeFile:
    """One file to write on a node."""

    path: str
    data: bytes
    mode: int


def _tar(files: Iterable[NodeFile]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for f in files:
            if not f.path.startswith("/") or ".." in f.path.split("/"):
                raise SparkctlError(f"{f.path}: not an absolute path", ExitCode.LAB)
            info = tarfile.TarInfo(f.path.lstrip("/"))
            info.size, info.mode, info.uid, info.gid = len(f.data), f.mode, 0, 0
            info.mtime = int(time.time())
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(f.data))
    return buf.getvalue()


# Unpacks the files over / on the node; then, where systemd runs the node,
# makes it read docker.service and starts it.
_INSTALL_SCRIPT = (
    "base64 -d | tar -x -f - -C / --no-overwrite-dir && "
    'if [ "$1" = units ] && [ -d /run/systemd/system ]; then '
    "systemctl daemon-reload && systemctl enable --now --quiet docker.service; fi"
)


def install(podman: Podman, name: str, files: Sequence[NodeFile], *, units: bool = True) -> None:
    """Write ``files`` into the container ``name`` in one ``podman exec``.

    ``units``: reload systemd and enable docker.service afterwards.
    """
    payload = base64.encodebytes(_tar(files)).decode()
    podman.exec(
        name,
        ["sh", "-c", _INSTALL_SCRIPT, "sh", "units" if units else "files"],
        input_text=payload,
        timeout=300,
    )
