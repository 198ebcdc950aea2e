"""The lab's image registry and the one table of stand-ins (sparkctl_lab.registry, .standins)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.errors import SparkctlError
from sparkctl.paths import roles_dir
from sparkctl_lab import registry, standins
from sparkctl_lab.hardware import HARDWARE_JSON_PATH, LabHardware
from tests.unit.pathload import load_file

DOCKER = load_file("lab_docker_standin_for_registry", standins.STANDINS_DIR / "docker.py")
ROLE_IMAGE = yaml.safe_load((roles_dir() / "sglang/defaults/main.yml").read_text())["sglang_image"]
ROLE_NCCL_DIR = yaml.safe_load((roles_dir() / "nccl/defaults/main.yml").read_text())[
    "nccl_tests_dir"
]


def _members(blob: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def _layer(blob: bytes) -> dict[str, tuple[bytes | None, int, int]]:
    with tarfile.open(fileobj=io.BytesIO(_members(blob)["layer.tar"])) as tar:
        return {
            m.name: (
                tar.extractfile(m).read() if m.isfile() else None,  # type: ignore[union-attr]
                m.mode,
                m.uid,
            )
            for m in tar.getmembers()
        }


def test_image_is_deterministic_and_content_addressed() -> None:
    one, two = registry.build_image(ROLE_IMAGE), registry.build_image(ROLE_IMAGE)
    assert one.data == two.data
    assert one.digest == "sha256:" + hashlib.sha256(one.data).hexdigest()
    parts = _members(one.data)
    assert set(parts) == {"config.json", "layer.tar"}
    assert one.image_id == "sha256:" + hashlib.sha256(parts["config.json"]).hexdigest()
    config = json.loads(parts["config.json"])
    assert config["rootfs"]["diff_ids"] == [
        "sha256:" + hashlib.sha256(parts["layer.tar"]).hexdigest()
    ]
    assert one.image_id != one.digest  # an image ID is not a repo digest, as in docker


def test_variant_is_other_content_under_the_same_tag() -> None:
    original = registry.build_image(ROLE_IMAGE)
    moved = registry.build_image(ROLE_IMAGE, variant="moved")
    assert moved.digest != original.digest and moved.image_id != original.image_id
    assert moved.config["config"]["Labels"][registry.VARIANT_LABEL] == "moved"
    assert registry.VARIANT_LABEL not in original.config["config"]["Labels"]
    assert registry.build_image(ROLE_IMAGE, variant="").digest == original.digest
    with pytest.raises(registry.RegistryError):
        registry.build_image(ROLE_IMAGE, variant="a b")


def test_layer_puts_the_standin_where_the_image_has_sglang() -> None:
    layer = _layer(registry.build_image(ROLE_IMAGE).data)
    project = registry.SGLANG_PYTHON_DIR.lstrip("/")
    source = registry.SGLANG_STANDIN_DIR
    # every file of the package (its data file of the release's ServerArgs defaults too)
    expected = {
        p.relative_to(source).as_posix(): p.read_bytes()
        for p in source.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    shipped = {
        name[len(project) + len("/sglang/") :]: data
        for name, (data, _, _) in layer.items()
        if name.startswith(f"{project}/sglang/") and data is not None
    }
    assert shipped == expected
    assert not [n for n in layer if "__pycache__" in n or n.endswith(".pyc")]
    site = f"usr/local/lib/python{registry.LAB_BASE_PYTHON}/dist-packages"
    pth = [n for n in layer if n.startswith(f"{site}/__editable__.sglang-") and n.endswith(".pth")]
    assert len(pth) == 1
    assert layer[pth[0]][0] == f"{registry.SGLANG_PYTHON_DIR}\n".encode()
    assert layer["home/ubuntu"][2] == 1000
    assert b"root:x:0:0:" in (layer["etc/passwd"][0] or b"")


def test_image_config_is_the_images_env_workdir_and_cmd() -> None:
    cfg = registry.build_image(ROLE_IMAGE).config["config"]
    assert cfg["Env"] == list(registry.IMAGE_ENV)
    assert cfg["Env"][0].startswith("PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:")
    assert cfg["WorkingDir"] == "/sgl-workspace/sglang"
    assert cfg["Cmd"] == ["/bin/bash"]


@pytest.mark.parametrize(
    ("text", "repository", "tag", "digest"),
    [
        ("lmsysorg/sglang:v0.5.17-cu130-runtime", "lmsysorg/sglang", "v0.5.17-cu130-runtime", None),
        ("docker.io/lmsysorg/sglang:v1", "lmsysorg/sglang", "v1", None),
        ("docker.io/library/ubuntu", "ubuntu", None, None),
        ("lmsysorg/sglang:v1@sha256:" + "a" * 64, "lmsysorg/sglang", "v1", "sha256:" + "a" * 64),
        ("lmsysorg/sglang@sha256:" + "b" * 64, "lmsysorg/sglang", None, "sha256:" + "b" * 64),
    ],
)
def test_references_parse_alike_here_and_in_the_docker_standin(
    text: str, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = registry.ImageRef.parse(text)
    assert (ref.repository, ref.tag, ref.digest) == (repository, tag, digest)
    theirs = DOCKER.Ref.parse(text)
    assert (theirs.repository, theirs.tag, theirs.digest) == (repository, tag, digest)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "LmsysOrg/sglang:v1",
        "lmsysorg/sglang:bad tag",
        "lmsysorg/sglang@sha256:123",
        " lmsysorg/sglang",
        "ghcr.io/someone/sglang:v1",
    ],
)
def test_bad_references_are_refused(text: str) -> None:
    with pytest.raises(registry.RegistryError):
        registry.ImageRef.parse(text)


def test_the_lab_image_comes_from_the_inventory_else_the_role_default() -> None:
    class Inv:
        def __init__(self, value: Any) -> None:
            self.value = value

        def cluster_var(self, name: str, default: Any = None) -> Any:
            assert name == "sglang_image"
            return self.value

    assert registry.lab_image_ref(Inv(None)) == ROLE_IMAGE
    assert registry.lab_image_ref(Inv("lmsysorg/sglang:v9")) == "lmsysorg/sglang:v9"
    for bad in ("{{ lookup('pipe', 'id') }}", "lmsysorg/sglang@sha256:" + "c" * 64, 42):
        with pytest.raises(registry.RegistryError):
            registry.lab_image_ref(Inv(bad))


def test_move_tag_and_back_in_a_registry_dir(tmp_path: Path) -> None:
    original = registry.write_registry(tmp_path, ROLE_IMAGE)
    key = registry.ImageRef.parse(ROLE_IMAGE).key
    assert registry.read_index(tmp_path) == {key: original}
    moved = registry.move_tag(tmp_path, ROLE_IMAGE, "v2")
    assert moved != original
    assert registry.read_index(tmp_path) == {key: moved}
    blobs = {p.name for p in (tmp_path / "blobs/sha256").iterdir()}
    assert blobs == {original[7:], moved[7:]}  # the old blob stays pullable by digest
    assert registry.restore_tag(tmp_path, ROLE_IMAGE) == original
    assert registry.read_index(tmp_path) == {key: original}
    with pytest.raises(registry.RegistryError):
        registry.move_tag(tmp_path, ROLE_IMAGE, "")
    (tmp_path / "index.json").write_text('{"a:b": "md5:x"}')
    with pytest.raises(registry.RegistryError):
        registry.read_index(tmp_path)


# ----------------------------------------------------------- the table


def test_settings_default_to_the_roles_defaults() -> None:
    settings = standins.NodeSettings.from_values()
    assert settings.nccl_tests_dir == ROLE_NCCL_DIR
    assert settings.sglang_image == ROLE_IMAGE
    for bad in ("relative/dir", "/opt/../etc", "/opt/$(id)"):
        with pytest.raises(SparkctlError):
            standins.NodeSettings.from_values(nccl_tests_dir=bad)


def test_node_files_put_every_placement_where_the_table_says() -> None:
    settings = standins.NodeSettings.from_values(
        nccl_tests_dir="/srv/nccl-tests", sglang_image="lmsysorg/sglang:v7"
    )
    hw = LabHardware()
    files = {f.path: f for f in standins.node_files("spark-02", hw, settings)}
    docker = standins.STANDINS_DIR / "docker.py"
    assert files["/usr/bin/docker"].data == docker.read_bytes()
    assert files["/usr/bin/docker"].mode == 0o755
    for tool in ("nvidia-smi", "ibdev2netdev", "show_gids"):
        assert files[f"/usr/bin/{tool}"].data == (standins.STANDINS_DIR / tool).read_bytes()
    nccl = (standins.STANDINS_DIR / "nccl_tests.py").read_bytes()
    for binary in standins.NCCL_TESTS_BINARIES:
        assert files[f"/srv/nccl-tests/build/{binary}"].data == nccl
    index = json.loads(files[f"{registry.REGISTRY_DIR}/index.json"].data)
    digest = registry.build_image("lmsysorg/sglang:v7").digest
    assert index == {"lmsysorg/sglang:v7": digest}
    blob = files[f"{registry.REGISTRY_DIR}/blobs/sha256/{digest[7:]}"].data
    assert "sha256:" + hashlib.sha256(blob).hexdigest() == digest
    assert json.loads(files[HARDWARE_JSON_PATH].data) == hw.to_dict("spark-02")
    assert b'DGX_NAME="DGX Spark"' in files["/etc/dgx-release"].data
    assert b"[Service]" in files["/usr/lib/systemd/system/docker.service"].data
    placed = {t for p in standins.PLACEMENTS for t in p.targets}
    assert len(files) == len(placed)  # one file per target, the blob's name filled in


def test_the_docker_standin_hides_exactly_the_host_tools_the_table_installs() -> None:
    host_tools = {t for p in standins.PLACEMENTS for t in p.targets if t.startswith("/usr/bin/")}
    assert set(DOCKER.HOST_ONLY_TOOLS) == host_tools
