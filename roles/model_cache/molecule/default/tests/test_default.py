"""roles/model_cache on two Sparks: the model the head holds is on the other, verified.

Expected values come from the scenario's inventory and the role's defaults;
every value is read from the nodes.
"""

# testinfra tests assert; pyproject's per-file-ignores cover tests/** only.
# ruff: noqa: S101

from __future__ import annotations

import json
from typing import Any

from verify_helpers import DEFAULTS, HEAD, SPARKS, instance, podman

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
