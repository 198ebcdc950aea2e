"""Building the lab node image with debootstrap (no image registry is reachable).

The image is a Debian bookworm ``minbase`` root with systemd as PID 1, sshd,
python3, netplan with systemd-networkd and the tools later steps use. It is
tagged with a hash of its recipe, so a second ``lab up`` reuses it and a
change of the recipe (package list, files below) builds a new one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.proc import require_tool, run
from sparkctl_lab.podman import Podman

log = logging.getLogger(__name__)

IMAGE_REPO = "localhost/sparkctl-lab"
SUITE = "bookworm"
# No mirror is named here: the image's packages come from the mirror this
# machine's own apt uses (host_sources), or the one given with --mirror.
APT_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))

# What a lab node has before provisioning. Tools a role installs on a real
# Spark are installed by that role, except the heavy MPI stack, which is
# baked in to keep the lab quick to provision (a DGX OS install ships it too).
PACKAGES: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "openssh-client",
    "python3",
    "python3-apt",
    "netplan.io",
    "iproute2",
    "iputils-ping",
    "ethtool",
    "openmpi-bin",
    "python3-mpi4py",
    "rsync",
    "iperf3",
    "sudo",
    "procps",
    "kmod",
    "nftables",
    "ca-certificates",
    "less",
    "tcpdump",
    # Baked in (disabled, no Internet sources) so that the base role's install
    # never starts a chronyd that asks Debian's public pool: the lab is
    # isolated, and the base role turns chrony on with the cluster's sources.
    "chrony",
)

# Files written into the root file system after debootstrap. Part of the recipe hash.
_HOSTKEYS_UNIT = """\
[Unit]
Description=Generate this node's own SSH host keys on first boot
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
RequiredBy=ssh.service
"""

_SSHD_CONF = """\
# sparkctl lab: key authentication only; many parallel sessions (Ansible forks, mpirun).
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UseDNS no
MaxStartups 64:30:128
MaxSessions 64
"""

_NETWORKD_CONF = """\
# The management interface is configured by the container runtime; networkd
# must only manage what netplan gives it, and must not flush foreign routes.
[Network]
ManageForeignRoutes=no
ManageForeignRoutingPolicyRules=no
"""

_FILES: dict[str, tuple[str, int]] = {
    "etc/systemd/system/sparkctl-lab-hostkeys.service": (_HOSTKEYS_UNIT, 0o644),
    "etc/ssh/sshd_config.d/sparkctl-lab.conf": (_SSHD_CONF, 0o644),
    "etc/systemd/networkd.conf.d/sparkctl-lab.conf": (_NETWORKD_CONF, 0o644),
}

_ENABLE = ("systemd-networkd.service", "sparkctl-lab-hostkeys.service", "ssh.service")
# Units that cannot work in a container and would only leave the node "degraded".
_MASK = (
    "systemd-networkd-wait-online.service",
    "systemd-udevd.service",
    "systemd-udev-trigger.service",
    "getty@tty1.service",
    "e2scrub_reap.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "systemd-timesyncd.service",
)

# Units installed but left off: the roles turn them on with their own config.
_DISABLE = ("chrony.service",)

RECIPE_VERSION = 5

# The certificate authorities this machine adds to its own store (Debian's
# update-ca-certificates reads this directory): a site's TLS-inspecting proxy has its
# CA there. A node of the lab goes out through the same network, so it trusts them
# too - as a Spark at that site would be set up by its operator - or pip on a node
# (the gateway's install) fails to verify the package index. pip reads the system
# bundle (the host's /etc/pip.conf does the same).
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
_PIP_CONF = """\
# sparkctl lab: pip checks servers against the system's CA bundle, which holds the
# CAs this machine trusts locally (a site proxy's).
[global]
cert = /etc/ssl/certs/ca-certificates.crt
"""


def local_cas(directory: Path = LOCAL_CAS) -> dict[str, str]:
    """name -> PEM text of each local CA of this machine (none: an empty mapping)."""
    if not directory.is_dir():
        return {}
    return {p.name: p.read_text() for p in sorted(directory.glob("*.crt")) if p.is_file()}


@dataclass(frozen=True)
class ImageRecipe:
    suite: str = SUITE
    packages: tuple[str, ...] = PACKAGES

    def digest(self) -> str:
        blob = json.dumps(
            {
                "v": RECIPE_VERSION,
                "suite": self.suite,
                "packages": sorted(self.packages),
                "files": _FILES,
                "enable": _ENABLE,
                "mask": _MASK,
                "disable": _DISABLE,
                "local_cas": local_cas(),
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def ref(self) -> str:
        return f"{IMAGE_REPO}:{self.digest()}"


@dataclass(frozen=True)
class AptSources:
    """Where the image's packages come from: the suite's mirror, and its security
    updates' (None: beside the mirror, as ``<mirror>/../debian-security``)."""

    mirror: str
    security: str | None = None


def _suite_uris(sources: tuple[Path, ...]) -> tuple[list[str], list[str]]:
    """The URIs the files give for SUITE and for SUITE-security, in their order."""
    main: list[str] = []
    security: list[str] = []
    for src in sources:
        try:
            text = src.read_text()
        except OSError:
            continue
        if src.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                uri = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
                suites = re.search(r"^Suites:(.*)$", stanza, re.M)
                if not uri or not suites:
                    continue
                names = suites.group(1).split()
                if SUITE in names:
                    main.append(uri.group(1).rstrip("/"))
                if f"{SUITE}-security" in names:
                    security.append(uri.group(1).rstrip("/"))
        else:
            for line in text.splitlines():
                m = re.match(r"\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)\s", line)
                if m and m.group(2) == SUITE:
                    main.append(m.group(1).rstrip("/"))
                elif m and m.group(2) == f"{SUITE}-security":
                    security.append(m.group(1).rstrip("/"))
    return [u for u in main if "security" not in u], security


def host_sources(sources: tuple[Path, ...] = APT_SOURCES) -> AptSources:
    """The Debian mirror (and security mirror) this machine's apt uses, so the lab
    uses the same ones; none found is an environment error naming --mirror."""
    main, security = _suite_uris(sources)
    if not main:
        raise SparkctlError(
            f"no Debian {SUITE} source in {', '.join(map(str, sources)) or 'no apt sources'}: "
            "the lab image takes its packages from this machine's apt mirror",
            ExitCode.ENVIRONMENT,
            hint="name one: sparkctl lab up --mirror URL (or SPARKCTL_LAB_MIRROR)",
        )
    return AptSources(main[0], security[0] if security else None)


def _apt_sources(apt: AptSources) -> str:
    mirror = apt.mirror.rstrip("/")
    # A mirror or caching proxy given alone is expected to serve debian-security
    # beside debian; this machine's own security source is used where it has one.
    security = (apt.security or mirror.rsplit("/", 1)[0] + "/debian-security").rstrip("/")
    return (
        f"deb {mirror} {SUITE} main\n"
        f"deb {mirror} {SUITE}-updates main\n"
        f"deb {security} {SUITE}-security main\n"
    )


def ensure_image(
    podman: Podman,
    *,
    work_dir: Path,
    mirror: str | None = None,
    rebuild: bool = False,
    progress: Callable[[str], None] = log.info,
) -> str:
    """Return the image reference for the current recipe, building it when missing."""
    recipe = ImageRecipe()
    if not rebuild and podman.image_exists(recipe.ref):
        progress(f"lab image {recipe.ref} is cached")
        return recipe.ref
    apt = AptSources(mirror.rstrip("/")) if mirror else host_sources()
    build_image(podman, recipe, work_dir=work_dir, apt=apt, progress=progress)
    return recipe.ref


def build_image(
    podman: Podman,
    recipe: ImageRecipe,
    *,
    work_dir: Path,
    apt: AptSources,
    progress: Callable[[str], None],
) -> None:
    mirror = apt.mirror
    debootstrap = require_tool("debootstrap")
    work_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="image-", dir=work_dir) as tmp:
        root = Path(tmp) / "root"
        logfile = work_dir / "debootstrap.log"
        progress(f"building lab image {recipe.ref} with debootstrap from {mirror} (log: {logfile})")
        with logfile.open("w") as fh:
            proc = subprocess.run(
                [
                    debootstrap,
                    "--variant=minbase",
                    f"--include={','.join(recipe.packages)}",
                    recipe.suite,
                    str(root),
                    mirror,
                ],
                stdout=fh,
                stderr=subprocess.STDOUT,
                check=False,
                timeout=900,
            )
        if proc.returncode != 0:
            tail = "\n".join(logfile.read_text(errors="replace").splitlines()[-15:])
            raise SparkctlError(
                f"debootstrap failed (exit {proc.returncode}):\n{tail}",
                ExitCode.LAB,
                hint=f"full log: {logfile}",
            )
        _customise(root, apt)
        progress("importing the root file system into podman")
        tar = subprocess.Popen(
            ["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE
        )
        try:
            imp = subprocess.run(
                [
                    podman.binary,
                    "import",
                    "--change",
                    'CMD ["/sbin/init"]',
                    "--change",
                    f"LABEL io.sparkctl.recipe={recipe.digest()}",
                    "-",
                    recipe.ref,
                ],
                stdin=tar.stdout,
                capture_output=True,
                text=True,
                env=podman.env,
                check=False,
            )
        finally:
            if tar.stdout:
                tar.stdout.close()
            tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise SparkctlError(f"podman import failed: {imp.stderr.strip()}", ExitCode.LAB)
        # debootstrap leaves device nodes and root-owned trees; rmtree handles them.
        shutil.rmtree(root, ignore_errors=True)
    progress(f"lab image built in {time.monotonic() - started:.0f} s")


def no_public_time_sources(chrony_conf: str) -> str:
    """chrony.conf with its pool/server/peer lines commented out (the lab has no Internet)."""
    return "".join(
        f"# off in the sparkctl lab (isolated): {line}"
        if line.split(maxsplit=1)[:1] in (["pool"], ["server"], ["peer"])
        else line
        for line in chrony_conf.splitlines(keepends=True)
    )


def _customise(root: Path, apt: AptSources) -> None:
    for rel, (content, mode) in _FILES.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(mode)
    for key in root.glob("etc/ssh/ssh_host_*"):
        key.unlink()  # every node generates its own on first boot
    (root / "etc/apt/sources.list").write_text(_apt_sources(apt))
    cas = local_cas()
    if cas:
        target = root / "usr/local/share/ca-certificates"
        target.mkdir(parents=True, exist_ok=True)
        for name, pem in cas.items():
            (target / name).write_text(pem)
            (target / name).chmod(0o644)
        run(["chroot", str(root), "update-ca-certificates"], what="update-ca-certificates")
        (root / "etc/pip.conf").write_text(_PIP_CONF)
    (root / "etc/hostname").write_text("")
    run(["chroot", str(root), "systemctl", "enable", *_ENABLE], what="systemctl enable")
    run(["chroot", str(root), "systemctl", "mask", *_MASK], what="systemctl mask")
    run(["chroot", str(root), "systemctl", "disable", *_DISABLE], what="systemctl disable")
    chrony = root / "etc/chrony/chrony.conf"
    chrony.write_text(no_public_time_sources(chrony.read_text()))
    for cache in root.glob("var/cache/apt/archives/*.deb"):
        cache.unlink()
