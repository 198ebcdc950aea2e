"""The rehearsal lab's image "registry": the SGLang image the Sparks pull.

A real Spark pulls the pinned ``lmsysorg/sglang`` image from Docker Hub. The
lab has no registry and reaches no network but package registries, so each
lab node carries a small content-addressed store instead, which the lab's
``docker`` stand-in (``lab/sparkctl_lab/standins/docker.py``) is the only reader
of::

    /etc/sparkctl-lab/registry/index.json        {"REPOSITORY:TAG": "sha256:HEX", ...}
    /etc/sparkctl-lab/registry/blobs/sha256/HEX  the image, a deterministic tar

``docker pull REF`` resolves ``repository:tag`` through ``index.json`` (a
reference with a digest names the blob directly), reads the blob and refuses
it unless its sha256 is the digest, as a registry client verifies what it
downloads. Only the repository and tag the inventory pins (``sglang_image``)
are served; any other tag fails with the registry's ``manifest unknown``.

The image blob is a tar of two members, the parts of an image that matter to
``docker run``:

- ``config.json``: the OCI image config (Env, Cmd, WorkingDir, Labels,
  rootfs.diff_ids). Its sha256 is the image ID, as in docker;
- ``layer.tar``: the root filesystem the image adds. Its sha256 is the one
  diff_id.

The blob's own sha256 stands in for the manifest digest: it is the image's
RepoDigest. (A real registry digests a manifest that names the config and the
compressed layers; one level of indirection fewer changes nothing the lab
observes: the digest still changes whenever the content does.)

The layer lays the SGLang stand-in (``lab/sparkctl_lab/standins/sglang``, copied
as opaque files) out where the real image has SGLang: the source tree at
``/sgl-workspace/sglang/python`` installed in editable mode, i.e. a
``__editable__`` ``.pth`` file and a dist-info in the interpreter's
``/usr/local/lib/python3.X/dist-packages`` (sgl-project/sglang
docker/Dockerfile: ``WORKDIR /sgl-workspace``, ``git clone ...
/sgl-workspace/sglang``, ``pip install -e "python[...]"``, final ``WORKDIR
/sgl-workspace/sglang``; the ``-runtime`` target copies
``/usr/local/lib/python3.12/dist-packages`` and ``/sgl-workspace`` from the
build stage, sgl-project/sglang PR #13861; ``pip show sglang`` in the image
prints ``Location: /usr/local/lib/python3.12/dist-packages`` and ``Editable
project location: /sgl-workspace/sglang/python``, THUDM/slime #1455).

Not the real image: the base OS layer (Ubuntu 24.04 with CUDA 13 and Python
3.12) is not shipped; the docker stand-in lends the node's own ``/usr``
(Debian bookworm, Python 3.11) as that layer, so the ``.pth`` goes to
``python3.11/dist-packages`` (:data:`LAB_BASE_PYTHON`).
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import re
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import yaml

from sparkctl.paths import roles_dir
from sparkctl_lab.nodefiles import NodeFile, install

if TYPE_CHECKING:
    from sparkctl_lab.podman import Podman

REGISTRY_DIR: Final = "/etc/sparkctl-lab/registry"
"""Where a lab node keeps the registry (``index.json`` and ``blobs/``)."""

REGISTRY_ENV: Final = "SPARKCTL_LAB_REGISTRY"
"""Environment variable that overrides :data:`REGISTRY_DIR` (tests)."""

INDEX_NAME: Final = "index.json"

SGLANG_STANDIN_DIR: Final = Path(__file__).resolve().parent / "standins" / "sglang"
"""The SGLang stand-in package: the image's content."""

SGLANG_PYTHON_DIR: Final = "/sgl-workspace/sglang/python"
"""Where the image has SGLang's python/ tree (the editable install's project)."""

IMAGE_WORKDIR: Final = "/sgl-workspace/sglang"
"""The image's WORKDIR (the Dockerfile's last WORKDIR)."""

LAB_BASE_PYTHON: Final = "3.11"
"""Python of the base layer the lab lends the image: the node's Debian bookworm
python3 (lab/sparkctl_lab/image.py installs ``python3``)."""

VARIANT_LABEL: Final = "io.sparkctl.lab.variant"
"""Label that tells a moved tag's content from the original (see :func:`move_tag`)."""

# The image's environment, in Dockerfile order. The nvidia/cuda base image sets
# PATH (CUDA's bin first), LD_LIBRARY_PATH, NVIDIA_VISIBLE_DEVICES and
# NVIDIA_DRIVER_CAPABILITIES (nvidia container-images/cuda base Dockerfiles);
# SGLang's docker/Dockerfile adds DEBIAN_FRONTEND, CUDA_HOME, GDRCOPY_HOME,
# appends /usr/local/nvidia/bin to PATH and the nvidia lib dirs to
# LD_LIBRARY_PATH ("Add GKE default lib and bin locations"), and sets the
# en_US.UTF-8 locale variables last.
_BASE_PATH = (
    "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:"
    "/usr/sbin:/usr/bin:/sbin:/bin"
)
IMAGE_ENV: Final[tuple[str, ...]] = (
    f"PATH={_BASE_PATH}:/usr/local/nvidia/bin",
    "NVIDIA_VISIBLE_DEVICES=all",
    "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
    "CUDA_VERSION=13.0.1",
    "DEBIAN_FRONTEND=noninteractive",
    "CUDA_HOME=/usr/local/cuda",
    "GDRCOPY_HOME=/usr/src/gdrdrv-2.5.1/",
    "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64:/usr/local/nvidia/lib:"
    "/usr/local/nvidia/lib64",
    "LANG=en_US.UTF-8",
    "LANGUAGE=en_US:en",
    "LC_ALL=en_US.UTF-8",
)

# Docker's reference grammar (distribution/reference, regexp.go), restricted to
# what the lab serves: an optional registry host is refused below, path
# components are lowercase alphanumerics with separators.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = re.compile(rf"^(?:{_COMPONENT})(?:/{_COMPONENT})*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}\Z")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")
DOCKER_HUB: Final = "docker.io"


class RegistryError(ValueError):
    """A reference or registry content the lab cannot serve."""


@dataclass(frozen=True)
class ImageRef:
    """``repository[:tag][@sha256:...]`` in Docker Hub's familiar form."""

    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        """Parse a reference as docker does; ``docker.io/`` and ``library/`` are dropped."""
        if not isinstance(text, str) or not text or len(text) > 255 or text != text.strip():
            raise RegistryError(f"invalid reference format: {text!r}")
        rest, _, digest = text.partition("@")
        if digest and not _DIGEST.match(digest):
            raise RegistryError(
                f"invalid reference format: {text!r} (digest must be "
                "sha256: and 64 lowercase hex digits)"
            )
        name, tag = rest, None
        slash = rest.rfind("/")
        colon = rest.rfind(":")
        if colon > slash:
            name, tag = rest[:colon], rest[colon + 1 :]
            if not _TAG.match(tag):
                raise RegistryError(f"invalid reference format: {text!r} (bad tag {tag!r})")
        first, _, remainder = name.partition("/")
        if remainder and ("." in first or ":" in first or first == "localhost"):
            if first not in {DOCKER_HUB, "index.docker.io", "registry-1.docker.io"}:
                raise RegistryError(
                    f"{text!r}: the lab serves Docker Hub references only (registry {first!r})"
                )
            name = remainder
        if name.startswith("library/"):
            name = name[len("library/") :]
        if not _NAME.match(name):
            raise RegistryError(
                f"invalid reference format: repository name ({name!r}) must be lowercase"
            )
        return cls(name, tag, digest or None)

    @property
    def key(self) -> str:
        """``repository:tag`` as ``index.json`` keys it (``latest`` when untagged)."""
        return f"{self.repository}:{self.tag or 'latest'}"

    def __str__(self) -> str:
        text = self.repository + (f":{self.tag}" if self.tag else "")
        return text + (f"@{self.digest}" if self.digest else "")


@dataclass(frozen=True)
class ImageBlob:
    """One image as the registry stores it."""

    digest: str
    data: bytes
    image_id: str
    config: Mapping[str, Any]


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# Owners other than root in the image (ubuntu:24.04 has user ubuntu, uid 1000).
_OWNERS: Final = {"home/ubuntu": 1000}


def _tar(entries: Iterable[tuple[str, bytes, int]], dirs: Iterable[str]) -> bytes:
    """A reproducible tar: sorted members, owner root, mtime 0, no pax headers."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        members: list[tuple[str, bytes | None, int]] = [(d, None, 0o755) for d in dirs]
        members += [(name, data, mode) for name, data, mode in entries]
        for name, data, mode in sorted(members, key=lambda m: m[0]):
            info = tarfile.TarInfo(name)
            owner = _OWNERS.get(name, 0)
            info.mode, info.mtime, info.uid, info.gid = mode, 0, owner, owner
            info.uname = info.gname = "ubuntu" if owner else "root"
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _standin_files(source: Path) -> list[tuple[str, bytes, int]]:
    if not (source / "__init__.py").is_file():
        raise RegistryError(f"{source}: not a Python package (the SGLang stand-in)")
    files = []
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if not path.is_file() or "__pycache__" in rel.parts or path.suffix in {".pyc", ".pyo"}:
            continue
        mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
        files.append((rel.as_posix(), path.read_bytes(), mode))
    return files


def _version_of(files: list[tuple[str, bytes, int]]) -> str | None:
    """``__version__`` of the package, read as text (the package is not imported)."""
    for name, data, _ in files:
        if name == "version.py":
            found = re.search(rb"""__version__\s*=\s*["']([^"']+)["']""", data)
            if found:
                return found.group(1).decode()
    return None


def _arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def build_image(
    ref: ImageRef | str,
    *,
    variant: str = "",
    source: Path = SGLANG_STANDIN_DIR,
    python_version: str = LAB_BASE_PYTHON,
    broken: bool = False,
) -> ImageBlob:
    """The image blob for ``ref``: the same inputs always give the same digest.

    ``variant`` (a label value) makes another image under the same tag: what a
    re-pushed tag looks like to ``docker pull``. ``""`` is the original.
    ``broken``: an image whose build lost SGLang's source tree (the editable
    install's .pth and dist-info are there, the package is not): ``python3 -m
    sglang.launch_server`` fails at once with ``No module named sglang``, as an
    image built wrong does. serve upgrade's rollback is rehearsed with it.
    """
    ref = ImageRef.parse(ref) if isinstance(ref, str) else ref
    if not re.match(r"^[A-Za-z0-9_.-]{0,63}\Z", variant):
        raise RegistryError(f"variant {variant!r}: letters, digits, _ . - (at most 63)")
    if not re.match(r"^3\.\d{1,2}\Z", python_version):
        raise RegistryError(f"python_version {python_version!r}: 3.N")
    package = _standin_files(source)
    version = _version_of(package)
    project = SGLANG_PYTHON_DIR.lstrip("/")
    site = f"usr/local/lib/python{python_version}/dist-packages"
    entries = [
        (f"{project}/sglang/{name}", data, mode) for name, data, mode in package if not broken
    ]
    dirs = {
        "tmp",
        "root",
        "etc",
        "var",
        "var/tmp",
        "run",
        "usr",
        "usr/local",
        "usr/local/bin",
        "usr/local/lib",
        f"usr/local/lib/python{python_version}",
        site,
        "sgl-workspace",
        "sgl-workspace/sglang",
        project,
        f"{project}/sglang",
    }
    dirs |= {
        f"{project}/sglang/{p.as_posix()}"
        for name, _, _ in package
        for p in Path(name).parents
        if p.as_posix() != "."
    }
    dist = f"sglang-{version or '0'}"
    # An editable install by pip (setuptools >= 64): a .pth naming the project
    # directory, and a dist-info whose direct_url.json says "editable".
    entries.append((f"{site}/__editable__.{dist}.pth", f"{SGLANG_PYTHON_DIR}\n".encode(), 0o644))
    info = f"{site}/{dist}.dist-info"
    dirs.add(info)
    entries += [
        (
            f"{info}/METADATA",
            f"Metadata-Version: 2.1\nName: sglang\nVersion: {version or '0'}\n".encode(),
            0o644,
        ),
        (f"{info}/INSTALLER", b"pip\n", 0o644),
        (
            f"{info}/direct_url.json",
            json.dumps(
                {"dir_info": {"editable": True}, "url": f"file://{SGLANG_PYTHON_DIR}"},
                sort_keys=True,
            ).encode()
            + b"\n",
            0o644,
        ),
    ]
    # /etc of the image: the accounts an Ubuntu base has (ubuntu:24.04 also has
    # user ubuntu, uid 1000). The docker stand-in adds hostname, hosts and
    # resolv.conf per container, as dockerd does.
    entries += [
        (
            "etc/passwd",
            b"root:x:0:0:root:/root:/bin/bash\n"
            b"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            b"ubuntu:x:1000:1000:Ubuntu:/home/ubuntu:/bin/bash\n",
            0o644,
        ),
        ("etc/group", b"root:x:0:\nnogroup:x:65534:\nubuntu:x:1000:\n", 0o644),
        (
            "etc/os-release",
            b'PRETTY_NAME="sparkctl lab image (base layer: the node\'s /usr)"\nID=sparkctl-lab\n',
            0o644,
        ),
    ]
    dirs |= {"home", "home/ubuntu"}
    layer = _tar(entries, sorted(dirs))
    labels = {
        "org.opencontainers.image.ref.name": "ubuntu",
        "org.opencontainers.image.version": "24.04",
        "io.sparkctl.lab.image": "SGLang stand-in (lab/sparkctl_lab/standins/sglang)",
    }
    if version:
        labels["io.sparkctl.lab.sglang-version"] = version
    if variant:
        labels[VARIANT_LABEL] = variant
    if broken:
        labels["io.sparkctl.lab.broken"] = "no SGLang package"
    config: dict[str, Any] = {
        "architecture": _arch(),
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        # The Ubuntu base image's CMD; neither nvidia/cuda nor SGLang sets one.
        "config": {
            "Env": list(IMAGE_ENV),
            "Cmd": ["/bin/bash"],
            "WorkingDir": IMAGE_WORKDIR,
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [_sha256(layer)]},
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    blob = _tar([("config.json", config_bytes, 0o644), ("layer.tar", layer, 0o644)], [])
    return ImageBlob(digest=_sha256(blob), data=blob, image_id=_sha256(config_bytes), config=config)


def registry_update(
    ref: ImageRef | str,
    *,
    variant: str = "",
    index: Mapping[str, str] | None = None,
    broken: bool = False,
) -> tuple[dict[str, bytes], str]:
    """Files of a registry serving ``ref`` (paths relative to the registry dir), and
    the digest its tag now names.

    ``index`` is the current index to update (its other entries are kept); the
    blob of ``ref``'s tag is added and the tag pointed at it.
    """
    ref = ImageRef.parse(ref) if isinstance(ref, str) else ref
    if ref.digest:
        raise RegistryError(
            f"{ref}: the lab registry serves a tag; give the reference without @sha256:..."
        )
    blob = build_image(ref, variant=variant, broken=broken)
    entries = dict(index or {})
    entries[ref.key] = blob.digest
    files = {
        INDEX_NAME: (json.dumps(entries, indent=2, sort_keys=True) + "\n").encode(),
        f"blobs/sha256/{blob.digest.removeprefix('sha256:')}": blob.data,
    }
    return files, blob.digest


def parse_index(text: str, where: str = INDEX_NAME) -> dict[str, str]:
    """An ``index.json``: repository:tag -> sha256 digest."""
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise RegistryError(f"{where}: not JSON ({exc})") from None
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.startswith("sha256:")
        for k, v in data.items()
    ):
        raise RegistryError(f"{where}: must map repository:tag to sha256:... digests")
    return data


def read_index(registry: Path) -> dict[str, str]:
    """``index.json`` of a registry directory ({} when there is none)."""
    path = registry / INDEX_NAME
    return parse_index(path.read_text(), str(path)) if path.exists() else {}


def write_registry(registry: Path, ref: ImageRef | str, *, variant: str = "") -> str:
    """Make the registry directory serve ``ref`` (with ``variant``'s content); the digest.

    Blobs already there stay: an image pulled by digest can still be pulled
    after its tag moved, as on a registry.
    """
    files, digest = registry_update(ref, variant=variant, index=read_index(registry))
    for name, data in files.items():
        path = registry / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return digest


def move_tag(registry: Path, ref: ImageRef | str, variant: str = "moved") -> str:
    """Re-push ``ref``'s tag with other content (a ``variant`` label): the new digest.

    What a tag moved on Docker Hub looks like: ``docker pull`` of the tag gets
    another digest, ``--pull never`` keeps running what is local.
    """
    if not variant:
        raise RegistryError("move_tag needs a variant other than the original ('')")
    return write_registry(registry, ref, variant=variant)


def restore_tag(registry: Path, ref: ImageRef | str) -> str:
    """Point ``ref``'s tag back at the original content: the original digest."""
    return write_registry(registry, ref, variant="")


def image_ref_of(inventory_value: object | None) -> str:
    """The lab's image: the inventory's ``sglang_image``, else the sglang role's default.

    The value is only ever parsed as a reference, never templated: a value with
    ``{{`` is refused.
    """
    value = inventory_value
    if value is None:
        defaults = yaml.safe_load((roles_dir() / "sglang" / "defaults" / "main.yml").read_text())
        value = defaults.get("sglang_image") if isinstance(defaults, dict) else None
    if not isinstance(value, str):
        raise RegistryError(f"sglang_image must be a string, got {value!r}")
    if "{{" in value or "{%" in value:
        raise RegistryError(f"sglang_image {value!r}: the lab takes a literal image reference")
    ref = ImageRef.parse(value)
    if ref.digest:
        raise RegistryError(
            f"sglang_image {value!r}: give the tag; the digest is sglang_image_digest"
        )
    return str(ref)


def lab_image_ref(inventory: Any) -> str:
    """:func:`image_ref_of` for an :class:`sparkctl.inventory.Inventory`."""
    return image_ref_of(inventory.cluster_var("sglang_image"))


def move_lab_tag(
    podman: Podman,
    nodes: Iterable[str],
    ref: ImageRef | str,
    variant: str = "moved",
    *,
    broken: bool = False,
) -> str:
    """:func:`move_tag` on the registries of running lab nodes; the new digest.

    ``variant=""`` moves the tag back to the original content (what
    :func:`restore_lab_tag` does). Images the nodes already pulled stay as
    they are, as on a Spark whose tag moved on the registry.
    """
    digest = ""
    for node in nodes:
        current = podman.exec(
            node, ["sh", "-c", f'cat "{REGISTRY_DIR}/{INDEX_NAME}" 2>/dev/null'], check=False
        ).stdout
        files, digest = registry_update(
            ref,
            variant=variant,
            index=parse_index(current, f"{node}:{INDEX_NAME}"),
            broken=broken,
        )
        install(
            podman,
            node,
            [
                NodeFile(f"{REGISTRY_DIR}/{name}", data, 0o644)
                for name, data in sorted(files.items())
            ],
            units=False,
        )
    return digest


def restore_lab_tag(podman: Podman, nodes: Iterable[str], ref: ImageRef | str) -> str:
    """Point the tag back at the original image on the lab nodes; the original digest."""
    return move_lab_tag(podman, nodes, ref, variant="")


def point_lab_tag(podman: Podman, nodes: Iterable[str], ref: ImageRef | str, digest: str) -> None:
    """Point the tag at ``digest`` again on the lab nodes, whose blob is still there (blobs
    stay when a tag moves): undoes :func:`move_lab_tag` exactly, even when the stand-in's
    sources changed since ``lab up`` (rebuilding the original would give another digest)."""
    ref = ImageRef.parse(ref) if isinstance(ref, str) else ref
    blob = f"{REGISTRY_DIR}/blobs/sha256/{digest.removeprefix('sha256:')}"
    for node in nodes:
        current = podman.exec(
            node,
            [
                "sh",
                "-c",
                f'cat "{REGISTRY_DIR}/{INDEX_NAME}" 2>/dev/null; test -f "{blob}" || echo NOBLOB',
            ],
            check=False,
        ).stdout
        if current.rstrip().endswith("NOBLOB"):
            raise RegistryError(f"{node}: the registry has no blob {digest} to point {ref.key} at")
        entries = parse_index(current, f"{node}:{INDEX_NAME}")
        entries[ref.key] = digest
        text = (json.dumps(entries, indent=2, sort_keys=True) + "\n").encode()
        install(
            podman,
            node,
            [NodeFile(f"{REGISTRY_DIR}/{INDEX_NAME}", text, 0o644)],
            units=False,
        )
