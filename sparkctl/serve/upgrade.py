"""``sparkctl serve upgrade``: a new image, a new model revision or both, without fear.

1. **Stage while serving** (playbooks/upgrade_stage.yml): the inventory's new
   image pulled by its digest on every Spark, the new model revision copied into
   the cache next to the serving one (the model_cache role's disk check counts
   what both take: the serving revision stays until ``model prune``). Nothing the
   running units read changes.
2. **One group at a time** (the order of sglang_group; one group is the whole
   cluster without groups):
   a. the previous version's golden answers and serve verify figures are read on
      the group, as it serves;
   b. with a gateway, the group leaves its rotation and its head finishes what it
      runs (``sglang:num_running_reqs`` 0) before anything stops;
   c. **swap**: its ranks stop, playbooks/serve_swap.yml (limited to its Sparks)
      points the model link at the new revision and renders its unit for the new
      image; serve up's own start and wait (phases, failure signatures) bring it
      up: the downtime is from the stop to the head's first ready answer;
   d. **gate**: serve verify's checks, the golden prompts, the figures against
      the previous version's, the bounded load (sparkctl.serve.golden);
   e. passed: the group joins the gateway again and the next group goes.
      Failed (a start-up signature, a timeout, verify, golden, figures, load):
      **rollback** of this group alone: stop, the previous image and model link
      put back by the same playbook, started, verified, back in the gateway; the
      upgrade stops there and exits non-zero, saying what failed and that the
      previous version serves again. Groups upgraded before keep the new version.

:func:`decide` is the one place that turns a group's recorded outcome into
keep / roll back: it is unit-tested on recorded outcomes.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sparkctl import console, inventory, model_store
from sparkctl.collection import tool_output
from sparkctl.endpoint import Endpoint
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.lock import inventory_lock
from sparkctl.playbook import run as run_playbook
from sparkctl.report.model import Check
from sparkctl.rules.formats import FORMATS
from sparkctl.serve import gateway, golden, intent, probe
from sparkctl.serve.cluster import Cluster, Group, open_cluster

if TYPE_CHECKING:
    import httpx

__all__ = [
    "GroupOutcome",
    "UpgradeResult",
    "Version",
    "decide",
    "upgrade",
]

DRAIN_POLL_S = 1.0


@dataclass(frozen=True)
class Version:
    """What a group runs: the image as its nodes record it (``repo:tag@sha256:...``;
    ``none`` with the venv method) and each node's model (where its link points)."""

    image: str
    models: tuple[tuple[str, str], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"image": self.image, "models": dict(self.models)}

    @property
    def model_roots(self) -> set[str]:
        return {root for _, root in self.models}

    def describe(self) -> str:
        roots = sorted(self.model_roots)
        return f"{self.image}, model {' / '.join(roots) or '?'}"


def parse_version(node: str, text: str) -> tuple[str, str]:
    """(image, model root) of one node from :func:`_version_command`'s output: the
    sglang role's version record (KEY=value lines) and a ``LINK=`` line."""
    try:
        record = tool_output.env_file(text)
    except tool_output.ToolOutputError as exc:
        raise SparkctlError(
            f"{node}: its version record does not read: {exc}", ExitCode.CHECKS_FAILED
        ) from None
    image = record.get("SGLANG_IMAGE", "")
    root = record.get("LINK", "")
    if not image:
        raise SparkctlError(
            f"{node}: no SGLANG_IMAGE in its version record: provision it before an upgrade",
            ExitCode.CHECKS_FAILED,
        )
    return image, root


def _version_command(cluster: Cluster, node: str) -> str:
    s = cluster.plan.node(node).sglang
    return (
        f"cat {shlex.quote(s.version_file)}; echo; "
        f"printf 'LINK=%s\\n' \"$(readlink -f {shlex.quote(s.model_path)})\""
    )


def read_version(cluster: Cluster, group: Group) -> Version:
    """What ``group``'s nodes run now; its nodes must agree on the image."""
    images: dict[str, str] = {}
    models = []
    out = cluster.each_own({n: _version_command(cluster, n) for n in group.members}, 30)
    for node in group.members:
        rc, text = out[node]
        if rc != 0:
            raise SparkctlError(
                f"{node}: cannot read what it runs: {text.strip()[-200:]}", ExitCode.UNREACHABLE
            )
        images[node], root = parse_version(node, text)
        models.append((node, root))
    if len(set(images.values())) > 1:
        raise SparkctlError(
            f"group {group.name}: its nodes run different images ("
            + ", ".join(f"{n} {i}" for n, i in images.items())
            + "): serve up it again first",
            ExitCode.CHECKS_FAILED,
        )
    return Version(next(iter(images.values())), tuple(models))


def target_image(cluster: Cluster) -> str:
    """The image the inventory names, pinned: ``repo:tag@sha256:...`` (``none`` with the
    venv method, where the upgrade changes only the model)."""
    s = cluster.sglang()
    if not s.image:
        return "none"
    if not s.image_digest:
        raise inventory.bad_input(
            cluster.inv.path,
            None,
            "sglang_image_digest",
            f"is empty: serve upgrade moves to a pinned image only ({s.image} alone could "
            "name another image on each node, or between staging and swap); nothing was "
            "contacted",
            hint=f"docker buildx imagetools inspect {s.image}, then "
            "-e sglang_image_digest=sha256:...",
        )
    return f"{s.image}@{s.image_digest}"


def _checked(value: str, fmt: str, what: str) -> str:
    """A value read from a node, held to the schema's format of the variable it becomes
    (it reaches the unit's command line): refused, never passed, when it does not fit."""
    ok, words = FORMATS[fmt]
    if not ok(value):
        raise SparkctlError(
            f"{what} {value[:120]!r} read back from the nodes is not {words}: not used",
            ExitCode.CHECKS_FAILED,
        )
    return value


def rollback_vars(before: Version, model_path: str) -> dict[str, Any]:
    """The variables that put ``before`` back: its image (``repo:tag@sha256:...``) and
    mounts for every model directory it read outside the cache (a head's copy read in
    place), which the inventory of the new version no longer names. The model link
    itself goes back by model_cache_link_previous."""
    out: dict[str, Any] = {"model_cache_link_previous": True}
    if before.image != "none":
        ref, _, digest = before.image.rpartition("@")
        out["sglang_image"] = _checked(ref, "image_ref", "the previous image")
        out["sglang_image_digest"] = _checked(digest, "digest", "the previous image's digest")
    base = model_path.rsplit("/", 1)[0] or "/"
    outside = sorted(
        _checked(root, "unit_path", "a previous model directory")
        for root in before.model_roots
        if root and root != base and not root.startswith(base.rstrip("/") + "/")
    )
    out["sglang_model_mounts"] = [base, *outside]
    return out


# ------------------------------------------------------------------ decisions
@dataclass
class GroupOutcome:
    """One group's upgrade as it happened: what ran before and after, each step's
    result, the checks of the gate, the downtime, and the rollback."""

    group: str
    head: str
    before: Version
    target: Version | None = None
    before_error: str = ""  # the group did not pass a verify before its upgrade
    drained: bool | None = None  # None: no gateway (nothing to drain)
    drain_s: float = 0.0
    swap_error: str = ""  # the swap play failed
    start_error: str = ""  # serve up's start-up failed (signature, timeout)
    checks: list[Check] = field(default_factory=list)
    loads: list[golden.Load] = field(default_factory=list)
    downtime_s: float | None = None
    decision: str = ""  # keep / rollback / not-started
    reason: str = ""
    rolled_back: bool = False
    rollback_ok: bool | None = None
    rollback_error: str = ""
    after: Version | None = None
    rollback_downtime_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "head": self.head,
            "before": self.before.to_dict(),
            "target": self.target.to_dict() if self.target else None,
            "before_error": self.before_error,
            "drained": self.drained,
            "drain_s": round(self.drain_s, 3),
            "swap_error": self.swap_error,
            "start_error": self.start_error,
            "checks": [c.__dict__ for c in self.checks],
            "loads": [ld.to_dict() for ld in self.loads],
            "downtime_s": None if self.downtime_s is None else round(self.downtime_s, 3),
            "decision": self.decision,
            "reason": self.reason,
            "rolled_back": self.rolled_back,
            "rollback_ok": self.rollback_ok,
            "rollback_error": self.rollback_error,
            "rollback_downtime_s": None
            if self.rollback_downtime_s is None
            else round(self.rollback_downtime_s, 3),
            "after": self.after.to_dict() if self.after else None,
        }


def decide(o: GroupOutcome) -> tuple[str, str]:
    """Keep the new version or roll this group back, and why, from what was recorded:
    - not serving right before (its own verify failed): nothing is touched ("not-started");
    - not drained: nothing was stopped, nothing to roll back ("not-started");
    - the swap play or the start-up failed: roll back;
    - any failed check of the gate (verify, golden, figures, bounded load): roll back;
    - else keep."""
    if o.before_error:
        return "not-started", (
            f"group {o.group} did not pass serve verify before its upgrade "
            f"({o.before_error}); nothing was changed: serve up and verify it first"
        )
    if o.drained is False:
        return "not-started", (
            f"group {o.group} did not finish its running requests within the drain "
            "timeout; it was not stopped and serves the previous version"
        )
    for what, error in (
        ("the swap failed", o.swap_error),
        ("the new version did not start", o.start_error),
    ):
        if error:
            return "rollback", f"{what}: {error}"
    failed = [c for c in o.checks if c.outcome == "failed"]
    if failed:
        first = failed[0]
        what = f"{first.check}" + (f" ({first.subject})" if first.subject else "")
        more = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
        return "rollback", f"{what} failed{more}: {first.message}"
    if not o.checks:
        return "rollback", "the new version was not checked"
    return "keep", "every check passed"


@dataclass
class UpgradeResult:
    inventory_path: str
    cluster: str
    target: str
    staged: bool
    groups: list[GroupOutcome]
    run_dir: str
    stage_only: bool = False
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and all(g.decision == "keep" for g in self.groups)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "cluster": self.cluster,
            "inventory": self.inventory_path,
            "target": self.target,
            "staged": self.staged,
            "stage_only": self.stage_only,
            "error": self.error,
            "run_dir": self.run_dir,
            "groups": [g.to_dict() for g in self.groups],
        }

    def failure(self) -> SparkctlError | None:
        if self.ok:
            return None
        if self.error:
            return SparkctlError(self.error, ExitCode.CHECKS_FAILED)
        bad = next(g for g in self.groups if g.decision != "keep")
        if bad.decision == "rollback" and bad.rollback_ok:
            msg = (
                f"serve upgrade: group {bad.group} was rolled back: {bad.reason}. The "
                f"previous version serves again ({bad.before.describe()})"
            )
        elif bad.decision == "rollback":
            msg = (
                f"serve upgrade: group {bad.group} failed ({bad.reason}) and its rollback "
                f"failed too: {bad.rollback_error}"
            )
        else:
            msg = f"serve upgrade: {bad.reason}"
        kept = [g.group for g in self.groups if g.decision == "keep"]
        if kept:
            msg += f"; group(s) {', '.join(kept)} keep the new version"
        return SparkctlError(
            msg,
            ExitCode.CHECKS_FAILED,
            hint=f"what each step saw: {self.run_dir}/upgrade.json",
        )


# ------------------------------------------------------------------ steps
def stage(inv: inventory.Inventory, extravars: Mapping[str, Any]) -> None:
    """The new image and model revision on every Spark, the service untouched."""
    extra = {**extravars, "model_cache_link_update": False}
    result = run_playbook(
        inv, playbook="upgrade_stage.yml", extravars=extra, command="serve-upgrade-stage"
    )
    failure = result.failure()
    if failure is not None:
        raise SparkctlError(
            f"serve upgrade: staging failed, nothing that serves was touched: {failure.message}",
            failure.code,
            hint="a model that does not fit: the serving revision stays in the cache during "
            "the upgrade; free space, or `sparkctl model prune` older revisions",
        )


def swap(inv: inventory.Inventory, group: Group, extravars: Mapping[str, Any]) -> str:
    """playbooks/serve_swap.yml on ``group``'s Sparks; "" or why it failed."""
    result = run_playbook(
        inv,
        limit=",".join(group.members),
        playbook="serve_swap.yml",
        extravars=dict(extravars),
        command="serve-upgrade-swap",
    )
    failure = result.failure()
    if failure is None:
        return ""
    first = next(iter(result.run.failures), None)
    said = f": {first.task}: {first.message[:400]}" if first is not None else ""
    return failure.message + said


def start(cluster: Cluster, group: Group) -> tuple[str, float]:
    """The group's ranks started and waited for as serve up does: "" or why not, and when
    its head answered (monotonic)."""
    from sparkctl.serve import up  # noqa: PLC0415

    view = cluster.narrowed(group)
    followers = up.Followers(view)
    followers.start()
    try:
        up.start_units(view)
        result = up.wait_up(view, followers, float(cluster.sglang().serve_timeout))
    finally:
        followers.stop()
    ready = time.monotonic()
    if result.ok:
        return "", ready
    lines = up.explain(result, float(cluster.sglang().serve_timeout))
    up.stop_units(view)
    return cluster.redact(f"{result.message}: " + " ".join(lines))[:600], ready


def drain(cluster: Cluster, group: Group, timeout: float) -> tuple[bool, float]:
    """Wait for the head's own ``sglang:num_running_reqs`` (and queue) to reach 0."""
    from sparkctl.serve.watch import read_metrics  # noqa: PLC0415

    t0 = time.monotonic()
    while True:
        metrics, _ = read_metrics(group)
        if metrics is not None and not metrics.busy:
            return True, time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            return False, time.monotonic() - t0
        time.sleep(DRAIN_POLL_S)


def measure(group: Group, key: str | None) -> tuple[list[Check], dict[str, float]]:
    """serve verify's checks of one group, and its figures."""
    from sparkctl.serve.verify import Verifier  # noqa: PLC0415

    v = Verifier(group, key)
    return v.run(), dict(v.figures)


def _endpoint(group: Group, key: str | None, http: httpx.Client) -> Endpoint:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return Endpoint(http, group.base_url, headers, group.model_name)


def _answers(group: Group, key: str | None) -> list[golden.Answer]:
    with probe.client(group.tls_ca_file, golden.REQUEST_S) as http:
        return golden.ask(_endpoint(group, key, http), group.sglang().golden_prompts)


def gate(
    group: Group,
    key: str | None,
    before_answers: list[golden.Answer],
    before_figures: dict[str, float],
) -> tuple[list[Check], list[golden.Load]]:
    """The new version's checks: serve verify, golden prompts, figures, bounded load."""
    s = group.sglang()
    checks, figures = measure(group, key)
    checks += golden.judge(group.head, s.golden_prompts, _answers(group, key), before_answers)
    checks += golden.compare_figures(group.head, before_figures, figures, s.upgrade_tolerance)
    with probe.client(group.tls_ca_file, golden.REQUEST_S) as http:
        send = golden.load_sender(_endpoint(group, key, http))
        loads = golden.bounded_load(send, s.upgrade_load_concurrency, s.upgrade_load_requests)
    checks += golden.load_checks(group.head, loads)
    return checks, loads


def _rollback(
    cluster: Cluster, group: Group, o: GroupOutcome, extravars: Mapping[str, Any]
) -> None:
    from sparkctl.serve import up  # noqa: PLC0415

    console.warn(f"serve upgrade: group {group.name}: {o.reason}; rolling back")
    o.rolled_back = True
    t0 = time.monotonic()
    up.stop_units(cluster.narrowed(group))
    back = {**extravars, **rollback_vars(o.before, group.sglang().model_path)}
    err = swap(cluster.inv, group, back)
    if not err:
        err, ready = start(cluster, group)
        if not err:
            o.rollback_downtime_s = ready - t0
    if not err:
        checks, _ = measure(group, cluster.api_key())
        bad = [c for c in checks if c.outcome == "failed"]
        err = f"verify after the rollback: {bad[0].check}: {bad[0].message}" if bad else ""
    if not err:
        o.after = read_version(cluster, group)
        if o.after.image != o.before.image or o.after.model_roots != o.before.model_roots:
            err = f"it runs {o.after.describe()}, not the previous {o.before.describe()}"
    o.rollback_ok, o.rollback_error = not err, cluster.redact(err)


def upgrade_group(
    cluster: Cluster, group: Group, extravars: Mapping[str, Any], target_image_ref: str
) -> GroupOutcome:
    """One group through drain, swap, gate, and keep or rollback."""
    from sparkctl.serve import up  # noqa: PLC0415

    key = cluster.api_key()
    s = group.sglang()
    o = GroupOutcome(group.name, group.head, read_version(cluster, group))
    console.progress(f"serve upgrade: group {group.name} runs {o.before.describe()}")
    before_checks, before_figures = measure(group, key)
    bad = [c for c in before_checks if c.outcome == "failed"]
    if bad:
        o.before_error = cluster.redact(f"{bad[0].check} on {bad[0].host}: {bad[0].message}")
        o.decision, o.reason = decide(o)
        return o
    before_answers = _answers(group, key)
    gw = cluster.gateway() if len(cluster.groups()) > 1 else None
    if gw is not None:
        gateway.leave(gw, group.base_url, 60.0)
        o.drained, o.drain_s = drain(cluster, group, float(s.upgrade_drain_timeout))
        if not o.drained:
            o.decision, o.reason = decide(o)
            gateway.join(gw, group.base_url, float(s.serve_timeout))
            return o
        console.progress(f"serve upgrade: group {group.name} drained in {o.drain_s:.1f} s")
    t_down = time.monotonic()
    up.stop_units(cluster.narrowed(group))
    o.swap_error = cluster.redact(swap(cluster.inv, group, extravars))
    if not o.swap_error:
        console.progress(f"serve upgrade: group {group.name} starting {target_image_ref}")
        o.start_error, ready = start(cluster, group)
        if not o.start_error:
            o.downtime_s = ready - t_down
            o.target = read_version(cluster, group)
            o.checks, o.loads = gate(group, key, before_answers, before_figures)
            o.checks = [
                Check(c.check, c.host, c.subject, c.outcome, cluster.redact(c.message))
                for c in o.checks
            ]
    o.decision, o.reason = decide(o)
    if o.decision == "rollback":
        _rollback(cluster, group, o, extravars)
    else:
        o.after = o.target
        if o.target is not None:  # passed the gate: it has served through a verify
            model_store.record_verified(cluster.inv.cluster, dict(o.target.models), "serve upgrade")
    if gw is not None and (o.decision == "keep" or o.rollback_ok):
        gateway.join(gw, group.base_url, float(s.serve_timeout))
    return o


def upgrade(
    inv: inventory.Inventory,
    *,
    extravars: Mapping[str, Any] | None = None,
    stage_only: bool = False,
    groups: Sequence[str] = (),
) -> UpgradeResult:
    """Stage the inventory's version, then upgrade one group at a time (see the module)."""
    extra = dict(extravars or {})
    with inventory_lock(inv, "serve upgrade"):
        cluster = open_cluster(inv, "serve-upgrade", extra)
        target = target_image(cluster)
        chosen = cluster.groups()
        unknown = sorted(set(groups) - {g.name for g in chosen})
        if unknown:
            raise inventory.bad_input(
                inv.path,
                None,
                "sglang_group",
                f"names no group {unknown[0]!r}",
                hint=f"the groups: {', '.join(g.name for g in chosen)}",
            )
        if groups:
            chosen = [g for g in chosen if g.name in groups]
        result = UpgradeResult(
            str(inv.path), inv.cluster, target, False, [], str(cluster.run_dir), stage_only
        )
        try:
            stage(inv, extra)
            result.staged = True
            if not stage_only:
                intent.record(inv.cluster, serving=True, by="serve upgrade")
                for g in chosen:
                    o = upgrade_group(cluster, g, extra, target)
                    result.groups.append(o)
                    if o.decision != "keep":
                        break
        except SparkctlError as exc:
            result.error = cluster.redact(exc.message)
        (cluster.run_dir / "upgrade.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    return result
