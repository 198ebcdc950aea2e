"""roles/model_cache on two Sparks: the model the head holds is on the other, verified.

Expected values come from the scenario's inventory and the role's defaults;
every value is read from the nodes.
"""

# testinfra tests assert; pyproject's per-file-ignores cover tests/** only.
# ruff: noqa: S101

from __future__ import annotations

import json
from typing import Any

from verify_helpers import DEFAULTS, HEAD, SPARKS, hostvars, instance, podman

testinfra_hosts = [podman(name) for name in SPARKS]

CACHE = DEFAULTS["model_cache_dir"]
HEAD_DIR = "/srv/sparkctl-model/mol"
COPY = f"{CACHE}/mol"


def sums(host: Any, root: str) -> dict[str, str]:
    out = host.check_output(f"cd {root} && find . -type f -print0 | xargs -0 sha256sum")
    return {
        path.removeprefix("./"): digest
        for digest, path in (line.split(maxsplit=1) for line in out.splitlines())
    }


def test_the_copy_matches_the_head_file_for_file(host: Any) -> None:
    head = instance(HEAD)
    want = sums(head, HEAD_DIR)
    assert len(want) == 4
    root = HEAD_DIR if host.backend.name == HEAD else COPY
    assert sums(host, root) == want


def test_the_manifest_lists_every_file_with_its_hash(host: Any) -> None:
    head = instance(HEAD)
    manifest = json.loads(host.file(f"{CACHE}/.sparkctl/mol.manifest.json").content_string)
    assert {f["path"]: f["sha256"] for f in manifest["files"]} == sums(head, HEAD_DIR)


def test_the_link_sglang_loads_points_at_the_model(host: Any) -> None:
    link = host.file(f"{CACHE}/current")
    assert link.is_symlink
    assert link.linked_to == (HEAD_DIR if host.backend.name == HEAD else COPY)


def test_no_partial_file_is_left(host: Any) -> None:
    assert host.check_output(f"find {CACHE} -name '*.sparkctl-partial'") == ""


def test_the_cache_belongs_to_the_cluster_user(host: Any) -> None:
    assert host.file(CACHE).user == "root"  # ansible_user of the scenario
    assert host.file("/usr/local/bin/sparkctl-model-relay").mode == 0o755


# ------------------------------------------------------------ the relay key
RELAY_KEY = "/root/.ssh/id_sparkctl_relay"


def _relay_line(host: Any) -> str:
    text = str(host.file("/root/.ssh/authorized_keys").content_string)
    lines = text.split("# BEGIN sparkctl model relay key\n", 1)[1].split("\n# END", 1)[0]
    assert "\n" not in lines
    return lines


def test_the_relay_key_is_authorised_for_the_forced_command_from_the_fabric(host: Any) -> None:
    line = _relay_line(host)
    assert line.startswith(
        'restrict,from="192.168.100.0/24,192.168.101.0/24",'
        f'command="/usr/local/bin/sparkctl-model-relay serve --cache-dir {CACHE} '
        '--net 192.168.100.0/24 --net 192.168.101.0/24 --cipher aes128-gcm@openssh.com" '
        "ssh-ed25519 "
    )
    assert host.file(RELAY_KEY).mode == 0o600


def test_the_relay_key_runs_nothing_but_the_relay(host: Any) -> None:
    """From the other node over the fabric, the key's holder asks for a shell command:
    the forced command answers with its refusal and nothing runs."""
    peer = next(name for name in SPARKS if name != host.backend.name)
    target = hostvars(host)["fabric_a_ip"]
    marker = "/root/sparkctl-relay-key-ran"
    ssh = instance(peer).run(
        "ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes "
        "-i %s %s touch %s",
        RELAY_KEY,
        target,
        marker,
    )
    assert ssh.rc == 1, (ssh.stdout, ssh.stderr)
    assert "this key runs `sparkctl-model-relay recv` only" in ssh.stderr
    assert not host.file(marker).exists
