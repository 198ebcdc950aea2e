"""``sparkctl model list/prune``: the model revisions each node's cache holds.

``serve upgrade`` stages a new revision next to the serving one and keeps the
previous one until the new one has proven itself, so that a rollback needs no
copy. Caches grow by one revision per upgrade; ``model prune`` removes what no
longer serves, and only once the serving revision has passed a verify.

A revision is a directory directly in ``model_cache_dir`` (a head or controller
model, named by ``model_cache_name``) or a snapshot of the hub layout
(``hub/models--ORG--NAME/snapshots/REVISION``, model_cache_source hf). On each
node, one names the link SGLang reads (``current``: serving) and one what the
link named before the last swap (``.sparkctl/previous-link``: the rollback's).

Verified: the controller records, per node, the revision that served through a
passing ``serve verify`` or ``serve upgrade`` gate
(``$SPARKCTL_STATE_DIR/clusters/CLUSTER/model-verified.json``). Prune refuses a
node whose serving revision is not that one.

Hub snapshots are not removed here: their files are links into shared blobs,
which huggingface_hub's own cache tools account for (``hf cache``); prune names
them and leaves them.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkctl import inventory
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.lock import inventory_lock
from sparkctl.paths import state_dir
from sparkctl.rules.formats import FORMATS

META = ".sparkctl"


@dataclass(frozen=True)
class Revision:
    node: str
    path: str
    size_bytes: int
    kind: str  # dir, hub
    serving: bool
    previous: bool
    verified: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def listing_command(cache_dir: str, link: str) -> str:
    """What a node's cache holds: ``SIZE<TAB>PATH`` per revision, then the link's target
    and the previous one. Only names the shell's glob finds; nothing is executed."""
    d = shlex.quote(cache_dir)
    return (
        f"cd {d} 2>/dev/null || exit 0; "
        "for p in */ hub/models--*/snapshots/*/; do "
        '[ -d "$p" ] && [ ! -L "${p%/}" ] && [ "$p" != hub/ ] && '
        'printf "%s\\t%s\\n" "$(du -sbL "$p" | cut -f1)" "$PWD/${p%/}"; done; '
        f'printf "LINK\\t%s\\n" "$(readlink -f {shlex.quote(link)})"; '
        f'printf "PREV\\t%s\\n" "$(cat {META}/previous-link 2>/dev/null)"'
    )


def parse_listing(node: str, text: str, cache_dir: str, verified: str | None) -> list[Revision]:
    """The revisions of :func:`listing_command`'s output (one parser, unit-tested)."""
    link = prev = ""
    rows: list[tuple[int, str]] = []
    for line in text.splitlines():
        head, _, tail = line.partition("\t")
        if head == "LINK":
            link = tail.strip()
        elif head == "PREV":
            prev = tail.strip()
        elif head.isdigit() and tail.startswith("/"):
            rows.append((int(head), tail.strip()))
        elif line.strip():
            raise SparkctlError(
                f"{node}: unexpected line listing {cache_dir}: {line[:120]!r}",
                ExitCode.CHECKS_FAILED,
            )
    return [
        Revision(
            node,
            path,
            size,
            "hub" if "/hub/" in path.removeprefix(cache_dir.rstrip("/")) else "dir",
            path == link,
            path == prev,
            path == verified,
        )
        for size, path in rows
    ]


# ------------------------------------------------------------------ verified
def _verified_file(cluster: str) -> Path:
    return state_dir() / "clusters" / cluster / "model-verified.json"


def verified_roots(cluster: str) -> dict[str, str]:
    path = _verified_file(cluster)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError:
        return {}  # unreadable: nothing counts as verified, prune refuses
    nodes = data.get("nodes", {}) if isinstance(data, dict) else {}
    return {
        str(n): str(v.get("root", ""))
        for n, v in nodes.items()
        if isinstance(v, dict) and isinstance(v.get("root"), str)
    }


def record_verified(cluster: str, roots: Mapping[str, str], by: str) -> None:
    """Each node's serving revision passed a verify (``by``: which command)."""
    path = _verified_file(cluster)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        data = {}
    nodes = data.get("nodes", {}) if isinstance(data, dict) else {}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for node, root in roots.items():
        if root:
            nodes[node] = {"root": root, "at": stamp, "by": by}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"nodes": nodes}, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


# ------------------------------------------------------------------ commands
@dataclass
class Listing:
    cluster: str
    revisions: list[Revision]
    removed: list[Revision] = field(default_factory=list)
    kept: list[tuple[Revision, str]] = field(default_factory=list)
    pruned: bool = False
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "revisions": [r.to_dict() for r in self.revisions],
            "pruned": self.pruned,
            "dry_run": self.dry_run,
            "removed": [r.to_dict() for r in self.removed],
            "kept": [{**r.to_dict(), "why": why} for r, why in self.kept],
        }

    def failure(self) -> SparkctlError | None:
        return None


def _read(cluster: Any) -> list[Revision]:
    verified = verified_roots(cluster.inv.cluster)
    out: list[Revision] = []
    nodes = cluster.nodes
    plans = {n: cluster.plan.node(n).model_cache for n in nodes}
    texts = cluster.each_own({n: listing_command(plans[n].dir, plans[n].link) for n in nodes}, 60)
    for n in nodes:
        rc, text = texts[n]
        if rc != 0:
            raise SparkctlError(
                f"{n}: cannot list {plans[n].dir}: {text.strip()[-200:]}", ExitCode.UNREACHABLE
            )
        out += parse_listing(n, text, plans[n].dir, verified.get(n))
    return out


def list_revisions(inv: inventory.Inventory) -> Listing:
    from sparkctl.serve.cluster import open_cluster  # noqa: PLC0415

    cluster = open_cluster(inv, "model-list")
    return Listing(inv.cluster, _read(cluster))


def plan_prune(
    revisions: Sequence[Revision],
    cache_dirs: Mapping[str, str],
    wanted: Mapping[str, str] | None = None,
) -> Listing:
    """What prune removes and what it keeps, and why (pure: unit-tested). A node whose
    serving revision has not passed a verify keeps everything; every node keeps the
    revision the inventory names (``wanted``: staged for an upgrade, or serving)."""
    wanted = wanted or {}
    listing = Listing("", list(revisions), pruned=True)
    unverified = {r.node for r in revisions if r.serving and not r.verified}
    unverified |= {
        n
        for n in {r.node for r in revisions}
        if not any(r.serving for r in revisions if r.node == n)
    }
    for r in revisions:
        base = cache_dirs.get(r.node, "").rstrip("/")
        if r.serving:
            listing.kept.append((r, "serving"))
        elif wanted.get(r.node) == r.path:
            listing.kept.append((r, "the inventory's revision (staged for serve upgrade)"))
        elif r.node in unverified:
            listing.kept.append((r, "the serving revision has not passed a verify yet"))
        elif r.kind == "hub":
            listing.kept.append((r, "a hub snapshot: remove it with huggingface_hub's `hf cache`"))
        elif not base or not r.path.startswith(base + "/") or "/" in r.path[len(base) + 1 :]:
            listing.kept.append((r, "not a revision of the cache"))
        elif not FORMATS["unit_path"][0](r.path):
            listing.kept.append((r, "a name sparkctl does not pass to rm"))
        else:
            listing.removed.append(r)
    return listing


def prune(
    inv: inventory.Inventory,
    *,
    dry_run: bool = False,
    extravars: Mapping[str, Any] | None = None,
) -> Listing:
    """Remove every revision that neither serves nor is in use, on nodes whose serving
    revision passed a verify."""
    from sparkctl.serve.cluster import open_cluster  # noqa: PLC0415

    with inventory_lock(inv, "model prune"):
        cluster = open_cluster(inv, "model-prune", extravars)
        revisions = _read(cluster)
        dirs = {n: cluster.plan.node(n).model_cache.dir for n in cluster.nodes}
        wanted = {n: cluster.plan.node(n).model_cache.root for n in cluster.nodes}
        listing = plan_prune(revisions, dirs, wanted)
        listing.cluster, listing.dry_run = inv.cluster, dry_run
        if dry_run:
            return listing
        for r in listing.removed:
            name = r.path.rsplit("/", 1)[1]
            meta = f"{dirs[r.node].rstrip('/')}/{META}/{name}"
            cmd = (
                f"{{sudo}}rm -rf -- {shlex.quote(r.path)} {shlex.quote(meta + '.manifest.json')} "
                f"{shlex.quote(meta + '.state.json')} {shlex.quote(meta + '.need')}"
            )
            out = cluster.each([r.node], cmd, 600)
            rc, text = out[r.node]
            if rc != 0:
                raise SparkctlError(
                    f"{r.node}: removing {r.path} failed: {text.strip()[-200:]}",
                    ExitCode.CHECKS_FAILED,
                )
    return listing
