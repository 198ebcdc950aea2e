"""The sparkctl.spark collection as an Ansible user gets it: built by
``ansible-galaxy collection build``, installed from that artifact by ``ansible-galaxy
collection install``, and used from a plain play of one's own: a role, the action
plugin, a filter and a module whose module_utils Ansible packs, all from the installed
copy (the checkout's is not on Ansible's collection path). No sparkctl command runs.

One build, one install and one play serve every assertion (module fixture).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from sparkctl import __version__

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "ansible_collections" / "sparkctl" / "spark"
BIN = Path(sys.executable).parent

PLAY = textwrap.dedent("""\
    - name: A play of an Ansible user
      hosts: localhost
      gather_facts: false
      roles:
        - role: sparkctl.spark.cluster_defaults
      tasks:
        - name: A file from my template, written by the collection's action plugin
          sparkctl.spark.sparkctl_render_file:
            src: motd.j2
            dest: "{{ sparkctl_render_dir }}/motd"
            mode: "0644"
        - name: The collection's module reads it back (its module_utils packed by Ansible)
          sparkctl.spark.sparkctl_probe:
            files: ["{{ sparkctl_render_dir }}/motd"]
            read: ["{{ sparkctl_render_dir }}/motd"]
            commands:
              kernel: [uname, -r]
          register: probe
        - name: Saved for the test
          ansible.builtin.copy:
            content: "{{ {'probe': probe,
                          'env': 'NCCL_DEBUG=WARN' | sparkctl.spark.nccl_parse_env} | to_json }}"
            dest: "{{ sparkctl_render_dir }}/result.json"
            mode: "0644"
    """)
# ansible_managed comes from the role's defaults; the comment filter is the collection's;
# fabric_a_netdev is a default of cluster_defaults.
TEMPLATE = (
    "# {{ ansible_managed | sparkctl.spark.sparkctl_comment('ansible_managed') }}\n"
    "fabric {{ fabric_a_netdev }}\n"
)


@dataclass(frozen=True)
class Used:
    artifact: Path
    members: list[str]
    installed: Path
    play: subprocess.CompletedProcess[str]
    out: Path


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, capture_output=True, text=True, env=env, cwd=cwd, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def used(tmp_path_factory: pytest.TempPathFactory) -> Used:
    base = tmp_path_factory.mktemp("collection")
    env = {
        **os.environ,
        "ANSIBLE_HOME": str(base / "home"),
        "ANSIBLE_LOCAL_TEMP": str(base / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CONFIG": str(base / "ansible.cfg"),  # none of the project's settings
        # The checkout's copy is on Python's path (the editable install): Ansible must
        # neither take it for installed nor run it.
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
    }
    (base / "ansible.cfg").write_text("[defaults]\n")
    built = _run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "build",
            str(COLLECTION),
            "--output-path",
            str(base / "dist"),
        ],
        env,
        base,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (artifact,) = sorted((base / "dist").glob("*.tar.gz"))
    with tarfile.open(artifact) as tar:
        members = tar.getnames()
    # Installed from the artifact alone: its one dependency, community.crypto, is the
    # ansible package's (no Galaxy here).
    installed = base / "collections"
    inst = _run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "install",
            str(artifact),
            "-p",
            str(installed),
            "--no-deps",
        ],
        env,
        base,
    )
    assert inst.returncode == 0, inst.stdout + inst.stderr
    user = base / "user"
    (user / "templates").mkdir(parents=True)
    (user / "templates" / "motd.j2").write_text(TEMPLATE)
    (user / "play.yml").write_text(PLAY)
    out = base / "out"
    out.mkdir()
    play_env = {
        **env,
        "ANSIBLE_COLLECTIONS_PATH": str(installed),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
    }
    play = _run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "play.yml",
            "-e",
            json.dumps({"sparkctl_render_dir": str(out)}),
        ],
        play_env,
        user,
    )
    return Used(
        artifact, members, installed / "ansible_collections" / "sparkctl" / "spark", play, out
    )


def test_the_artifact_is_named_for_this_version_and_holds_no_tests(used: Used) -> None:
    assert used.artifact.name == f"sparkctl-spark-{__version__}.tar.gz"
    assert "MANIFEST.json" in used.members and "FILES.json" in used.members
    roles = {m.split("/")[1] for m in used.members if m.startswith("roles/") and "/" in m[6:]}
    assert roles == {p.name for p in (COLLECTION / "roles").iterdir() if p.is_dir()}
    for kind in ("modules", "filter", "action", "module_utils"):
        assert any(m.startswith(f"plugins/{kind}/") and m.endswith(".py") for m in used.members)
    assert not [m for m in used.members if "/molecule" in m or "__pycache__" in m]


def test_the_manifest_and_galaxy_yml_agree_with_the_package(used: Used) -> None:
    galaxy = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())
    manifest = json.loads((used.installed / "MANIFEST.json").read_text())["collection_info"]
    assert galaxy["version"] == manifest["version"] == __version__
    assert (manifest["namespace"], manifest["name"]) == ("sparkctl", "spark")


def test_a_plain_play_uses_the_installed_role_action_filter_and_module(used: Used) -> None:
    assert used.play.returncode == 0, used.play.stdout[-3000:] + used.play.stderr[-3000:]
    assert (used.out / "motd").read_text() == "# Ansible managed\nfabric enp1s0f1np1\n"
    result = json.loads((used.out / "result.json").read_text())
    probe = result["probe"]
    assert probe["files"][str(used.out / "motd")]["content"].startswith("# Ansible managed")
    assert probe["commands"]["kernel"]["rc"] == 0 and probe["commands"]["kernel"]["stdout"]
    assert result["env"] == {"NCCL_DEBUG": "WARN"}
    # The task ran the installed copy, not the checkout's.
    assert str(REPO / "ansible_collections") not in used.play.stdout
