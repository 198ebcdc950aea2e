"""sparkctl_lab.image: the recipe digest that tags the image, and the apt mirror.

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

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl_lab import image
from sparkctl_lab.image import (
    PACKAGES,
    AptSources,
    ImageRecipe,
    _apt_sources,
    host_sources,
)

# /etc/apt/sources.list.d/debian.sources in the form of the Debian 12 container
# image's, comments included (deb822 allows comment lines inside a stanza); its
# hosts are example names (no mirror is named in the project).
DEBIAN_SOURCES = """\
Types: deb
# http://snapshot.example.org/archive/debian/20250520T000000Z
URIs: {main}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
# http://snapshot.example.org/archive/debian-security/20250520T000000Z
URIs: http://deb.example.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""

SECURITY_FIRST_SOURCES = """\
Types: deb
URIs: http://security.example.org/debian-security
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
    code = "from sparkctl_lab.image import ImageRecipe; print(ImageRecipe().digest())"
    for seed in ("1", "12345"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            timeout=60,
        )
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
    for pkg in (
        "systemd",
        "openssh-server",
        "python3",
        "netplan.io",
        "iproute2",
        "ethtool",
        "openmpi-bin",
        "iperf3",
        "sudo",
    ):
        assert pkg in PACKAGES


# ------------------------------------------------------------ host_sources
def test_deb822_mirror_and_security(tmp_path: Path) -> None:
    src = write(
        tmp_path / "debian.sources", DEBIAN_SOURCES.format(main="http://deb.example.org/debian")
    )
    assert host_sources((src,)) == AptSources(
        "http://deb.example.org/debian", "http://deb.example.org/debian-security"
    )
    assert host_sources((src,)).mirror == "http://deb.example.org/debian"


def test_deb822_custom_mirror_trailing_slash_stripped(tmp_path: Path) -> None:
    src = write(
        tmp_path / "debian.sources", DEBIAN_SOURCES.format(main="http://ftp.de.example.org/debian/")
    )
    assert host_sources((src,)).mirror == "http://ftp.de.example.org/debian"


def test_deb822_skips_security_stanza(tmp_path: Path) -> None:
    src = write(tmp_path / "debian.sources", SECURITY_FIRST_SOURCES)
    assert host_sources((src,)) == AptSources(
        "https://mirror.example.net/debian", "http://security.example.org/debian-security"
    )


def test_deb822_updates_alone_is_not_the_suite(tmp_path: Path) -> None:
    src = write(
        tmp_path / "debian.sources",
        """\
        Types: deb
        URIs: http://updates.example.net/debian
        Suites: bookworm-updates
        Components: main

        Types: deb
        URIs: http://mirror.example.net/debian
        Suites: bookworm
        Components: main
        """,
    )
    assert host_sources((src,)) == AptSources("http://mirror.example.net/debian")


def test_no_source_for_the_suite_is_an_environment_error(tmp_path: Path) -> None:
    src = write(
        tmp_path / "debian.sources",
        """\
        Types: deb
        URIs: http://mirror.example.net/debian
        Suites: trixie trixie-updates
        Components: main
        """,
    )
    for sources in ((src,), (tmp_path / "nope.sources", tmp_path / "nope.list"), ()):
        with pytest.raises(SparkctlError) as err:
            host_sources(sources)
        assert err.value.code == ExitCode.ENVIRONMENT
        assert "no Debian bookworm source" in str(err.value)
        assert "--mirror" in (err.value.hint or "")


def test_one_line_sources_list(tmp_path: Path) -> None:
    src = write(
        tmp_path / "sources.list",
        """\
        # deb http://old.example.org/debian bookworm main
        deb http://security.example.org/debian-security bookworm-security main
        deb-src http://src.example.org/debian bookworm main
        deb https://packages.example.com/apt cloud-sdk-bookworm main
        deb [arch=amd64 signed-by=/etc/apt/k.gpg] http://ftp.example.org/debian/ bookworm main
        deb http://second.example.org/debian bookworm main
        """,
    )
    assert host_sources((src,)) == AptSources(
        "http://ftp.example.org/debian", "http://security.example.org/debian-security"
    )


def test_one_line_sources_list_security_only(tmp_path: Path) -> None:
    src = write(
        tmp_path / "sources.list",
        """\
        deb http://security.example.org/debian-security bookworm-security main
        deb http://deb.example.org/debian-security/ bookworm main
        """,
    )
    with pytest.raises(SparkctlError, match="no Debian bookworm source"):
        host_sources((src,))


def test_first_readable_source_wins(tmp_path: Path) -> None:
    deb822 = write(
        tmp_path / "debian.sources", DEBIAN_SOURCES.format(main="http://first.example.org/debian")
    )
    legacy = write(
        tmp_path / "sources.list", "deb http://second.example.org/debian bookworm main\n"
    )
    missing = tmp_path / "missing.sources"
    assert host_sources((deb822, legacy)).mirror == "http://first.example.org/debian"
    assert host_sources((missing, legacy)).mirror == "http://second.example.org/debian"
    # A directory is skipped as unreadable.
    assert host_sources((tmp_path, legacy)).mirror == "http://second.example.org/debian"


def test_no_mirror_is_named_in_the_image_module() -> None:
    """The image's mirror comes from this machine's apt sources or --mirror only."""
    text = Path(image.__file__).read_text()
    assert not re.findall(r"https?://[a-z0-9.-]+\.[a-z]{2,}", text), re.findall(
        r"https?://[a-z0-9.-]+\.[a-z]{2,}", text
    )


# ------------------------------------------------------------ _apt_sources
def test_apt_sources_with_this_machines_security_source() -> None:
    assert _apt_sources(
        AptSources("http://deb.example.org/debian", "http://security.example.org/debian-security/")
    ) == (
        "deb http://deb.example.org/debian bookworm main\n"
        "deb http://deb.example.org/debian bookworm-updates main\n"
        "deb http://security.example.org/debian-security bookworm-security main\n"
    )


def test_apt_sources_custom_mirror_serves_security_too() -> None:
    assert _apt_sources(AptSources("http://mirror.example.net/debian")) == (
        "deb http://mirror.example.net/debian bookworm main\n"
        "deb http://mirror.example.net/debian bookworm-updates main\n"
        "deb http://mirror.example.net/debian-security bookworm-security main\n"
    )


def test_apt_sources_mirror_with_trailing_slash() -> None:
    lines = _apt_sources(AptSources("http://mirror.example.net/debian/")).splitlines()
    assert lines[2] == "deb http://mirror.example.net/debian-security bookworm-security main"


def test_lab_chrony_has_no_public_sources() -> None:
    debian = (
        "confdir /etc/chrony/conf.d\n"
        "# Use Debian vendor zone.\n"
        "pool 2.debian.pool.ntp.org iburst\n"
        "server time.example iburst\n"
        "sourcedir /run/chrony-dhcp\n"
    )
    out = image.no_public_time_sources(debian)
    live = [line for line in out.splitlines() if line and not line.startswith("#")]
    assert live == ["confdir /etc/chrony/conf.d", "sourcedir /run/chrony-dhcp"]
    assert "# off in the sparkctl lab (isolated): pool 2.debian.pool.ntp.org iburst" in out
    assert image.no_public_time_sources(out) == out


def test_the_image_trusts_this_machines_local_cas_and_changes_with_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A site proxy's CA in this machine's store goes into the image (pip on a node then
    verifies the index through the same proxy); another CA set is another image."""
    (tmp_path / "site-proxy.crt").write_text("-----BEGIN CERTIFICATE-----\nx\n")
    (tmp_path / "notes.txt").write_text("not a certificate")
    assert image.local_cas(tmp_path) == {"site-proxy.crt": "-----BEGIN CERTIFICATE-----\nx\n"}
    assert image.local_cas(tmp_path / "missing") == {}
    monkeypatch.setattr(image, "local_cas", lambda: {})
    without = image.ImageRecipe().digest()
    monkeypatch.setattr(image, "local_cas", lambda: {"a.crt": "pem"})
    assert image.ImageRecipe().digest() != without
