"""The rehearsal lab's stand-ins, and the one table of what goes where on a lab node.

A lab node differs from a DGX Spark only at the leaves: the programs that
need a GPU, RDMA or a real registry. Each stand-in here is installed where
the real program is, and :data:`PLACEMENTS` is the only list of those paths:
``sparkctl lab up`` (``Lab._dress``) and the molecule scenarios
(``.config/molecule/dress.py``) both install :func:`node_files` with
:func:`install`, so lab nodes and molecule instances are dressed alike.

- ``nvidia-smi``, ``ibdev2netdev``, ``show_gids``: the NVIDIA driver's and
  MLNX_OFED's tools, answering from the node's ``hardware.json``;
- ``docker.py`` as ``/usr/bin/docker`` (docker-ce-cli's path) and a
  ``docker.service`` (docker-ce's unit; the stand-in has no daemon, the unit
  is there for units that order themselves after it);
- ``nccl_tests.py`` under each nccl-tests binary name in
  ``<nccl_tests_dir>/build`` (where the nccl role builds them on a Spark);
- the image registry (:mod:`sparkctl_lab.registry`): the index and the blob of
  the inventory's ``sglang_image``, the only image ``docker pull`` can get;
- the node's description: ``/etc/sparkctl-lab/hardware.json`` (read by the
  stand-ins) and ``/etc/dgx-release`` (DGX OS's release file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import yaml

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.paths import roles_dir
from sparkctl_lab import registry
from sparkctl_lab.hardware import HARDWARE_JSON_PATH, LabHardware, render_dgx_release
from sparkctl_lab.nodefiles import NodeFile, install

if TYPE_CHECKING:
    from sparkctl_lab.podman import Podman

STANDINS_DIR: Final = Path(__file__).resolve().parent
"""Directory holding the stand-in programs."""

NCCL_TESTS_BINARIES: Final = ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf")
"""The nccl-tests binaries sparkctl runs (roles/nccl/vars/main.yml ``_nccl_tests_binaries``)."""

NCCL_TESTS_DIR_VAR: Final = "{nccl_tests_dir}"


@dataclass(frozen=True)
class Placement:
    """One stand-in and the paths it is installed at on a lab node.

    ``source`` is a file in :data:`STANDINS_DIR`, or ``<generated:...>`` for
    content made per node (see :func:`node_files`); ``targets`` may name
    ``{nccl_tests_dir}`` (the inventory's ``nccl_tests_dir``).
    """

    source: str
    targets: tuple[str, ...]
    mode: int
    what: str


DOCKER_SERVICE: Final = """\
# sparkctl rehearsal lab: docker-ce's unit, for the docker stand-in
# (/usr/bin/docker, lab/sparkctl_lab/standins/docker.py). There is no dockerd:
# each container has its own shim in docker-<id>.scope. Stopping this unit
# stops the running containers, as stopping dockerd does (with each
# container's stop timeout).
[Unit]
Description=Docker Application Container Engine (sparkctl lab stand-in)
Documentation=https://docs.docker.com
After=network-online.target
Wants=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/bin/docker version --format {{.Server.Version}}
ExecStop=/bin/sh -c 'ids=$(/usr/bin/docker ps -q); [ -z "$ids" ] || /usr/bin/docker stop $ids'

[Install]
WantedBy=multi-user.target
"""

PLACEMENTS: Final[tuple[Placement, ...]] = (
    Placement(
        "nvidia-smi",
        ("/usr/bin/nvidia-smi",),
        0o755,
        "nvidia-smi of the NVIDIA driver (nvidia-utils)",
    ),
    Placement(
        "ibdev2netdev",
        ("/usr/bin/ibdev2netdev",),
        0o755,
        "ibdev2netdev of MLNX_OFED / DOCA (mlnx-tools)",
    ),
    Placement(
        "show_gids", ("/usr/bin/show_gids",), 0o755, "show_gids of MLNX_OFED / DOCA (mlnx-tools)"
    ),
    Placement("docker.py", ("/usr/bin/docker",), 0o755, "the docker CLI (docker-ce-cli)"),
    Placement(
        "<generated:docker.service>",
        ("/usr/lib/systemd/system/docker.service",),
        0o644,
        "docker-ce's unit",
    ),
    Placement(
        "nccl_tests.py",
        tuple(f"{NCCL_TESTS_DIR_VAR}/build/{b}" for b in NCCL_TESTS_BINARIES),
        0o755,
        "the nccl-tests binaries the nccl role builds",
    ),
    Placement(
        "<generated:registry>",
        (
            f"{registry.REGISTRY_DIR}/{registry.INDEX_NAME}",
            f"{registry.REGISTRY_DIR}/blobs/sha256/<digest>",
        ),
        0o644,
        "the image registry serving the inventory's sglang_image",
    ),
    Placement(
        "<generated:hardware.json>",
        (HARDWARE_JSON_PATH,),
        0o644,
        "what the node pretends to be (sparkctl_lab.hardware)",
    ),
    Placement("<generated:dgx-release>", ("/etc/dgx-release",), 0o644, "DGX OS's release file"),
)
"""Every stand-in and where it goes on a lab node: the one table."""

_SAFE_DIR = re.compile(r"^/[A-Za-z0-9_./-]*$")


@dataclass(frozen=True)
class NodeSettings:
    """The inventory's values the placements depend on."""

    nccl_tests_dir: str
    sglang_image: str

    def __post_init__(self) -> None:
        if not _SAFE_DIR.match(self.nccl_tests_dir) or ".." in self.nccl_tests_dir.split("/"):
            raise SparkctlError(
                f"nccl_tests_dir {self.nccl_tests_dir!r}: an absolute path of "
                "letters, digits, _ . - and /",
                ExitCode.BAD_INPUT,
            )
        try:
            registry.image_ref_of(self.sglang_image)
        except registry.RegistryError as exc:
            raise SparkctlError(str(exc), ExitCode.BAD_INPUT) from None

    @classmethod
    def from_values(
        cls, nccl_tests_dir: object | None = None, sglang_image: object | None = None
    ) -> NodeSettings:
        """Settings from inventory values; ``None`` takes the role's default."""
        if nccl_tests_dir is None:
            defaults = yaml.safe_load((roles_dir() / "nccl" / "defaults" / "main.yml").read_text())
            nccl_tests_dir = defaults.get("nccl_tests_dir") if isinstance(defaults, dict) else None
        if not isinstance(nccl_tests_dir, str):
            raise SparkctlError(
                f"nccl_tests_dir must be a string, got {nccl_tests_dir!r}", ExitCode.BAD_INPUT
            )
        try:
            image = registry.image_ref_of(sglang_image)
        except registry.RegistryError as exc:
            raise SparkctlError(str(exc), ExitCode.BAD_INPUT) from None
        return cls(nccl_tests_dir=nccl_tests_dir.rstrip("/") or "/", sglang_image=image)

    @classmethod
    def from_inventory(cls, inventory: Any) -> NodeSettings:
        """From an :class:`sparkctl.inventory.Inventory` (cluster-wide values)."""
        return cls.from_values(
            inventory.cluster_var("nccl_tests_dir"), inventory.cluster_var("sglang_image")
        )


def node_files(hostname: str, hardware: LabHardware, settings: NodeSettings) -> list[NodeFile]:
    """Everything :data:`PLACEMENTS` puts on the lab node ``hostname``."""
    files: list[NodeFile] = []
    for placement in PLACEMENTS:
        if placement.source == "<generated:registry>":
            content, _ = registry.registry_update(settings.sglang_image)
            files += [
                NodeFile(f"{registry.REGISTRY_DIR}/{name}", data, placement.mode)
                for name, data in sorted(content.items())
            ]
            continue
        if placement.source == "<generated:docker.service>":
            data = DOCKER_SERVICE.encode()
        elif placement.source == "<generated:hardware.json>":
            data = hardware.to_json(hostname).encode()
        elif placement.source == "<generated:dgx-release>":
            data = render_dgx_release(hostname).encode()
        else:
            data = (STANDINS_DIR / placement.source).read_bytes()
        for target in placement.targets:
            path = target.replace(NCCL_TESTS_DIR_VAR, settings.nccl_tests_dir)
            files.append(NodeFile(path, data, placement.mode))
    return files


def dress(podman: Podman, name: str, hardware: LabHardware, settings: NodeSettings) -> None:
    """Make the container ``name`` a lab Spark: every placement installed."""
    install(podman, name, node_files(name, hardware, settings))
