"""roles/nvidia_driver on a Spark with DGX OS: the state the role leaves.

prepare.yml installs empty packages named like NVIDIA's and like DGX OS's
kernel packages; each test is one case per node (and per package or
blacklist entry); expected values come from the role's defaults and vars,
through the role's own filter plugin. The scenario runs the sim profile: no
nvcc and no kernel of its own (cluster_hw), so the kernel/module and nvcc
checks are skipped here and unit-tested on real outputs instead.
"""

# testinfra tests assert; pyproject's per-file-ignores cover tests/** only.
# ruff: noqa: S101

from __future__ import annotations

import re
from typing import Any

import pytest
from verify_helpers import DEFAULTS, SPARKS, collection_plugin, podman, role_yaml

testinfra_hosts = [podman(name) for name in SPARKS]

VARS = role_yaml("vars")
APT_CONF = VARS["_nvidia_driver_apt_conf"]
HOLD_LIST = VARS["_nvidia_driver_hold_list"]
FILTERS = collection_plugin("filter", "nvidia_hold")

FLAVOUR = DEFAULTS["nvidia_driver_kernel_flavour"]
BRANCH = DEFAULTS["nvidia_driver_branch"]
# The hold set as the role's defaults make it (vars/main.yml), written out.
HOLD_SET: list[str] = [
    *(
        f"{name}-{BRANCH}{tail}"
        for name, tails in (
            ("nvidia-driver", ("", "-*")),
            ("nvidia-dkms", ("", "-*")),
            ("nvidia-kernel-common", ("",)),
            ("nvidia-kernel-source", ("", "-*")),
            ("nvidia-utils", ("", "-*")),
            ("nvidia-compute-utils", ("", "-*")),
            ("nvidia-firmware", ("-*",)),
            ("libnvidia-*", ("",)),
            ("xserver-xorg-video-nvidia", ("",)),
            ("cuda-drivers", ("",)),
        )
        for tail in tails
    ),
    f"cuda-*-{DEFAULTS['nvidia_driver_cuda_package_version']}",
    *DEFAULTS["nvidia_driver_hold_packages"],
    *(
        f"linux-{part}{FLAVOUR}"
        for part in ("", "image-", "headers-", "tools-", "modules-nvidia-fs-")
    ),
    f"linux-modules-nvidia-{BRANCH}-open-*",
]
BLACKLIST: list[str] = [FILTERS.nvidia_hold_regex(p) for p in HOLD_SET]
# The stand-ins of prepare.yml and the dpkg selection each must end with.
SELECTIONS = {
    "libnccl2": "hold",  # pattern libnccl2
    "nvidia-utils-580": "hold",  # pattern nvidia-utils-580
    "cuda-toolkit-13-0": "hold",  # pattern cuda-*-13-0
    "linux-image-nvidia-hwe-24.04": "hold",  # the kernel metapackage
    "linux-modules-nvidia-580-open-6.17.0-1014-nvidia": "hold",  # a kernel's NVIDIA modules
    "linux-image-6.17.0-1014-nvidia": "install",  # one kernel's image: a fixed version anyway
    "nvidia-settings": "install",  # matches no pattern
    "libnccl2-extra": "install",  # libnccl2 is anchored: not a prefix
    "libnvidia-container1": "install",  # the container toolkit: not the driver branch
    "cuda-keyring": "install",  # the repository's key: not a CUDA version
}


@pytest.mark.parametrize(("package", "selection"), sorted(SELECTIONS.items()))
def test_dpkg_selection(host: Any, package: str, selection: str) -> None:
    status = host.check_output("dpkg-query -W -f '${Status}' %s", package)
    assert status == f"{selection} ok installed"


def test_exactly_the_matching_packages_are_held(host: Any) -> None:
    held = set(host.check_output("apt-mark showhold").split())
    assert held == {p for p, s in SELECTIONS.items() if s == "hold"}


def test_blacklist_file(host: Any) -> None:
    conf = host.file(APT_CONF)
    assert conf.user == "root"
    assert conf.mode == 0o644
    assert "Unattended-Upgrade::Package-Blacklist {" in conf.content_string
    assert re.findall(r'^\s+"([^"]*)";$', conf.content_string, re.M) == BLACKLIST


@pytest.mark.parametrize("entry", BLACKLIST)
def test_apt_reads_the_blacklist_entry(host: Any, entry: str) -> None:
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    assert f'Unattended-Upgrade::Package-Blacklist:: "{entry}";' in dump.splitlines()


def test_hold_list_names_the_hold_set(host: Any) -> None:
    listed = host.file(HOLD_LIST)
    assert (listed.user, listed.mode) == ("root", 0o644)
    lines = [
        line for line in listed.content_string.splitlines() if line and not line.startswith("#")
    ]
    assert lines == HOLD_SET


# (cuda-keyring is one of prepare's DGX OS stand-ins, there to be left unheld; the
# CUDA repository it would bring is test_no_cuda_repository_added's.)
@pytest.mark.parametrize(
    "package", ["cuda-drivers", f"nvidia-driver-{DEFAULTS['nvidia_driver_branch']}-open"]
)
def test_dgx_os_driver_is_kept_nothing_installed(host: Any, package: str) -> None:
    assert host.file("/etc/dgx-release").exists
    assert not host.package(package).is_installed


def test_no_cuda_repository_added(host: Any) -> None:
    assert host.run("ls /etc/apt/sources.list.d/ | grep -i cuda").rc != 0


def test_no_reboot_pending(host: Any) -> None:
    assert not host.file("/run/reboot-required").exists
