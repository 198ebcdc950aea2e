"""Simulated DGX Spark hardware for the rehearsal lab.

Lab nodes are Debian bookworm containers without a GPU or RDMA. The stand-in
tools of :mod:`sparkctl_lab.standins` (``nvidia-smi``, ``ibdev2netdev``,
``show_gids``, ``docker``; that package's ``PLACEMENTS`` says where each goes)
make them answer like a DGX Spark; they read the node's ``hardware.json``,
which :meth:`LabHardware.to_json` writes, and compute everything else from live
state (clock, sysfs, /proc, ``ip``). This module also renders the node's
``/etc/dgx-release`` in the DGX OS 7 format.

See :data:`HARDWARE_JSON_SCHEMA` for the file's keys.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Final

HARDWARE_JSON_PATH: Final = "/etc/sparkctl-lab/hardware.json"
"""Where a lab node keeps its hardware description."""

HARDWARE_JSON_ENV: Final = "SPARKCTL_LAB_HW"
"""Environment variable that overrides :data:`HARDWARE_JSON_PATH` (tests)."""

SYSFS_ENV: Final = "SPARKCTL_LAB_SYSFS"
"""Environment variable that overrides the sysfs root ``/sys`` (tests)."""

IP_JSON_ENV: Final = "SPARKCTL_LAB_IP_JSON"
"""Environment variable naming a file of ``ip -j -4 addr show`` output that
``show_gids`` reads instead of running ``ip`` (tests)."""

GB10_PCI_BUS_ID: Final = "0000000F:01:00.0"
"""Bus id nvidia-smi reports for the GB10 on every DGX Spark."""

HARDWARE_JSON_SCHEMA: Final = """\
hardware.json (JSON object) -- read by the lab stand-in tools

  gpu_present     bool    false: nvidia-smi fails as if the driver were not
                          loaded ("NVIDIA-SMI has failed ...", exit 9)
  gpu_name        str     "NVIDIA GB10"
  driver_version  str     "580.95.05"  (NVIDIA-SMI and Driver Version)
  cuda_version    str     "13.0"       (CUDA Version in the header)
  gpu_uuid        str     "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
                          uuid5 of the hostname, so stable per node
  pci_bus_id      str     "0000000F:01:00.0"
  roce            list    ConnectX-7 twins, in ibdev2netdev/show_gids order:
                          {"ibdev": "rocep1s0f0", "port": 1,
                           "netdev": "enp1s0f0np0", "pci": "0000:01:00.0"}, ...
  link_rate_mbit  int     link rate the lab's fabric gives each twin (Mb/s)

Optional keys (defaults in the tools): gpu_process_names (executables counted
as GPU processes by nvidia-smi), cx7_fw_ver ("28.45.4028"), cx7_device_id
(4129), cx7_part_id ("NA"), cx7_description ("") for ibdev2netdev -v.
"""


@dataclass(frozen=True)
class RocePort:
    """One RoCE device of the ConnectX-7 and the netdev it drives."""

    ibdev: str
    port: int
    netdev: str
    pci: str


SPARK_ROCE_PORTS: Final[tuple[RocePort, ...]] = (
    RocePort("rocep1s0f0", 1, "enp1s0f0np0", "0000:01:00.0"),
    RocePort("rocep1s0f1", 1, "enp1s0f1np1", "0000:01:00.1"),
    RocePort("roceP2p1s0f0", 1, "enP2p1s0f0np0", "0002:01:00.0"),
    RocePort("roceP2p1s0f1", 1, "enP2p1s0f1np1", "0002:01:00.1"),
)
"""The four RoCE devices of a DGX Spark: each QSFP port appears twice (the
``p1`` and ``P2p1`` PCIe domains), see ``ibdev2netdev`` on a Spark."""

_UUID_NAMESPACE: Final = uuid.UUID("6f1c1f0e-58f5-4b8e-9a51-7d1b7e0c5a10")


def gpu_uuid_for(hostname: str) -> str:
    """nvidia-smi style GPU UUID, stable for a hostname (uuid5)."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, hostname)}"


@dataclass(frozen=True)
class LabHardware:
    """What a lab node pretends to be; serialised to ``hardware.json``."""

    gpu_name: str = "NVIDIA GB10"
    driver_version: str = "580.95.05"
    cuda_version: str = "13.0"
    link_rate_mbit: int = 1000
    gpu_present: bool = True

    def to_dict(self, hostname: str) -> dict[str, Any]:
        """The ``hardware.json`` content for ``hostname`` as a dict."""
        return {
            "gpu_present": self.gpu_present,
            "gpu_name": self.gpu_name,
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "gpu_uuid": gpu_uuid_for(hostname),
            "pci_bus_id": GB10_PCI_BUS_ID,
            "roce": [asdict(p) for p in SPARK_ROCE_PORTS],
            "link_rate_mbit": self.link_rate_mbit,
        }

    def to_json(self, hostname: str) -> str:
        """The ``hardware.json`` file content for ``hostname``."""
        return json.dumps(self.to_dict(hostname), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> LabHardware:
        """Read back what :meth:`to_json` wrote (host-specific keys are ignored)."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("hardware.json must hold a JSON object")
        try:
            gpu_name = data["gpu_name"]
            driver_version = data["driver_version"]
            cuda_version = data["cuda_version"]
            link_rate_mbit = data["link_rate_mbit"]
            gpu_present = data.get("gpu_present", True)
        except KeyError as exc:
            raise ValueError(f"hardware.json lacks {exc.args[0]!r}") from exc
        for key, value, kind in (
            ("gpu_name", gpu_name, str),
            ("driver_version", driver_version, str),
            ("cuda_version", cuda_version, str),
            ("gpu_present", gpu_present, bool),
        ):
            if not isinstance(value, kind):
                raise ValueError(f"hardware.json: {key} must be a {kind.__name__}")
        if isinstance(link_rate_mbit, bool) or not isinstance(link_rate_mbit, int):
            raise ValueError("hardware.json: link_rate_mbit must be an integer")
        return cls(
            gpu_name=gpu_name,
            driver_version=driver_version,
            cuda_version=cuda_version,
            link_rate_mbit=link_rate_mbit,
            gpu_present=gpu_present,
        )


def dgx_serial_for(hostname: str) -> str:
    """A 13-digit serial number (the length DGX units report), stable per host."""
    digest = hashlib.sha256(f"sparkctl-lab-serial:{hostname}".encode()).hexdigest()
    return f"{int(digest, 16) % 10**13:013d}"


def render_dgx_release(
    hostname: str,
    *,
    swbuild_version: str = "7.2.3",
    swbuild_date: str = "2025-09-10-13-50-03",
    commit_id: str = "833b4a7",
    ota_version: str | None = None,
    ota_date: str | None = None,
) -> str:
    """``/etc/dgx-release`` of a DGX Spark on DGX OS 7.

    The defaults are the factory image's values as ``cat /etc/dgx-release``
    shows them on DGX Spark units (build 7.2.3 of 2025-09-10, commit 833b4a7,
    platform "DGX Server for KVM"); an OTA update appends a blank line and the
    ``DGX_OTA_VERSION`` / ``DGX_OTA_DATE`` pair, rendered here when
    ``ota_version`` is given. The serial number is synthetic, derived from the
    hostname.
    """
    lines = [
        'DGX_NAME="DGX Spark"',
        'DGX_PRETTY_NAME="NVIDIA DGX Spark"',
        f'DGX_SWBUILD_DATE="{swbuild_date}"',
        f'DGX_SWBUILD_VERSION="{swbuild_version}"',
        f'DGX_COMMIT_ID="{commit_id}"',
        'DGX_PLATFORM="DGX Server for KVM"',
        f'DGX_SERIAL_NUMBER="{dgx_serial_for(hostname)}"',
    ]
    if ota_version is not None:
        lines += ["", f'DGX_OTA_VERSION="{ota_version}"']
        if ota_date is not None:
            lines.append(f'DGX_OTA_DATE="{ota_date}"')
    return "\n".join(lines) + "\n"
