"""sparkctl.lab.image: the recipe digest that tags the image, and the apt mirror.

Nothing here runs debootstrap or podman.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sparkctl.lab import image
from sparkctl.lab.image import DEFAULT_MIRROR, PACKAGES, ImageRecipe, _apt_sources, host_mirror

# /etc/apt/sources.list.d/debian.sources of the Debian 12 container image,
# comments included (deb822 allows comment lines inside a stanza).
DEBIAN_SOURCES = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: {main}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""

SECURITY_FIRST_SOURCES = """\
Types: deb
URIs: http://security.debian.org/debian-security
Suites: bookworm-security
Components: main

Types: deb
URIs: https://mirror.example.net/debian/
Suites: bookworm bookworm-updates
Components: main contrib
"""


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


# ------------------------------------------------------------------ digest
def test_digest_is_short_hex_and_stable() -> None:
    digest = ImageRecipe().digest()
    assert re.fullmatch(r"[0-9a-f]{16}", digest)
    assert ImageRecipe().digest() == digest
    assert ImageRecipe().ref == f"localhost/sparkctl-lab:{digest}"


def test_digest_is_stable_across_processes() -> None:
    """Another interpreter with another hash seed computes the same tag (a cached
    image is found again by the next `lab up`)."""
    code = "from sparkctl.lab.image import ImageRecipe; print(ImageRecipe().digest())"
    for seed in ("1", "12345"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env={**os.environ, "PYTHONHASHSEED": seed}, timeout=60)
        assert out.stdout.strip() == ImageRecipe().digest()


def test_digest_ignores_package_order() -> None:
    assert ImageRecipe(packages=tuple(reversed(PACKAGES))).digest() == ImageRecipe().digest()


def test_digest_changes_with_the_recipe() -> None:
    base = ImageRecipe().digest()
    added = ImageRecipe(packages=(*PACKAGES, "vim-tiny")).digest()
    removed = ImageRecipe(packages=PACKAGES[1:]).digest()
    other_suite = ImageRecipe(suite="trixie").digest()
    assert len({base, added, removed, other_suite}) == 4


def test_digest_changes_with_the_files_written(monkeypatch: pytest.MonkeyPatch) -> None:
    base = ImageRecipe().digest()
    files = dict(image._FILES)
    rel, (content, mode) = next(iter(files.items()))
    monkeypatch.setattr(image, "_FILES", {**files, rel: (content + "# changed\n", mode)})
    assert ImageRecipe().digest() != base


def test_packages_the_lab_relies_on() -> None:
    for pkg in ("systemd", "openssh-server", "python3", "netplan.io", "iproute2", "ethtool",
                "openmpi-bin", "iperf3", "sudo"):
        assert pkg in PACKAGES


# ------------------------------------------------------------ host_mirror
def test_deb822_default_debian(tmp_path: Path) -> None:
    src = write(tmp_path / "debian.sources", DEBIAN_SOURCES.format(main="http://deb.debian.org/debian"))
    assert host_mirror((src,)) == "http://deb.debian.org/debian"


def test_deb822_custom_mirror_trailing_slash_stripped(tmp_path: Path) -> None:
    src = write(tmp_path / "debian.sources",
                DEBIAN_SOURCES.format(main="http://ftp.de.debian.org/debian/"))
    assert host_mirror((src,)) == "http://ftp.de.debian.org/debian"


def test_deb822_skips_security_stanza(tmp_path: Path) -> None:
    src = write(tmp_path / "debian.sources", SECURITY_FIRST_SOURCES)
    assert host_mirror((src,)) == "https://mirror.example.net/debian"


def test_deb822_other_suite_only(tmp_path: Path) -> None:
    src = write(tmp_path / "debian.sources", """\
        Types: deb
        URIs: http://mirror.example.net/debian
        Suites: trixie trixie-updates
        Components: main
        """)
    assert host_mirror((src,)) == DEFAULT_MIRROR


def test_one_line_sources_list(tmp_path: Path) -> None:
    src = write(tmp_path / "sources.list", """\
        # deb http://old.example.org/debian bookworm main
        deb http://security.debian.org/debian-security bookworm-security main
        deb-src http://src.example.org/debian bookworm main
        deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main
        deb [arch=amd64 signed-by=/etc/apt/k.gpg] http://ftp.example.org/debian/ bookworm main
        deb http://second.example.org/debian bookworm main
        """)
    assert host_mirror((src,)) == "http://ftp.example.org/debian"


def test_one_line_sources_list_security_only(tmp_path: Path) -> None:
    src = write(tmp_path / "sources.list", """\
        deb http://security.debian.org/debian-security bookworm-security main
        deb http://deb.debian.org/debian-security/ bookworm main
        """)
    assert host_mirror((src,)) == DEFAULT_MIRROR


def test_first_readable_source_wins(tmp_path: Path) -> None:
    deb822 = write(tmp_path / "debian.sources",
                   DEBIAN_SOURCES.format(main="http://first.example.org/debian"))
    legacy = write(tmp_path / "sources.list",
                   "deb http://second.example.org/debian bookworm main\n")
    missing = tmp_path / "missing.sources"
    assert host_mirror((deb822, legacy)) == "http://first.example.org/debian"
    assert host_mirror((missing, legacy)) == "http://second.example.org/debian"
    assert host_mirror((tmp_path, legacy)) == "http://second.example.org/debian"  # a directory


def test_fallback_default(tmp_path: Path) -> None:
    assert host_mirror((tmp_path / "nope.sources", tmp_path / "nope.list")) == DEFAULT_MIRROR
    assert host_mirror(()) == DEFAULT_MIRROR
    assert DEFAULT_MIRROR == "http://deb.debian.org/debian"


# ------------------------------------------------------------ _apt_sources
def test_apt_sources_default_mirror() -> None:
    assert _apt_sources("http://deb.debian.org/debian") == (
        "deb http://deb.debian.org/debian bookworm main\n"
        "deb http://deb.debian.org/debian bookworm-updates main\n"
        "deb http://deb.debian.org/debian-security bookworm-security main\n"
    )


def test_apt_sources_custom_mirror_serves_security_too() -> None:
    assert _apt_sources("http://mirror.example.net/debian") == (
        "deb http://mirror.example.net/debian bookworm main\n"
        "deb http://mirror.example.net/debian bookworm-updates main\n"
        "deb http://mirror.example.net/debian-security bookworm-security main\n"
    )


def test_apt_sources_mirror_with_trailing_slash() -> None:
    lines = _apt_sources("http://mirror.example.net/debian/").splitlines()
    assert lines[2] == "deb http://mirror.example.net/debian-security bookworm-security main"


def test_lab_chrony_has_no_public_sources() -> None:
    debian = ("confdir /etc/chrony/conf.d\n"
              "# Use Debian vendor zone.\n"
              "pool 2.debian.pool.ntp.org iburst\n"
              "server time.example iburst\n"
              "sourcedir /run/chrony-dhcp\n")
    out = image.no_public_time_sources(debian)
    live = [line for line in out.splitlines() if line and not line.startswith("#")]
    assert live == ["confdir /etc/chrony/conf.d", "sourcedir /run/chrony-dhcp"]
    assert "# off in the sparkctl lab (isolated): pool 2.debian.pool.ntp.org iburst" in out
    assert image.no_public_time_sources(out) == out
