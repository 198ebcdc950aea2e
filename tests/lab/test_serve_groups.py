"""Two independent TP groups on the lab's four Sparks (inventory/sim-two-groups.ini).

spark1+spark2 form group a, spark3+spark4 group b: each group has its own
head, rendezvous and endpoint, TP=2 over two nodes. provision renders the
units from that inventory; serve up starts both; serve verify checks both
endpoints. The lab is provisioned back to one group of four afterwards.

The two inventories differ only in ``sglang_group`` (diff inventory/sim.ini
inventory/sim-two-groups.ini), which of the roles sglang reads (units, ranks,
rendezvous, firewall) and monitoring (one SGLang scrape target per group head,
labelled with its group); model_cache puts this module's model in every node's
cache. So the switch both ways is ``provision -t model_cache -t sglang -t
monitoring``, as an operator would regroup a provisioned cluster: the other
roles' state is the session's first provision's, and running them again would
change nothing (the idempotency test in test_provision.py shows that).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sparkctl.serve.gateway import Gateway
from tests.conftest import REPO, SIM_INVENTORY, LabSession, needed_after, sparkctl
from tests.lab.test_monitoring import SGLANG_PORT, api, targets, wait_for
from tests.labhost import STATE, corrupt_in_place, ssh

# After every other lab test (tests/conftest.py, _phase): provisioning the lab back to
# one group of four costs a provision, which only a later test would need.
pytestmark = [pytest.mark.lab, pytest.mark.regroups_lab]

TWO = REPO / "inventory" / "sim-two-groups.ini"
# The gateway on the first group's head (sim-two-groups.ini, [sparks:vars]).
GATEWAY = "http://10.77.0.11:30080"
HEADS = {"a": "http://10.77.0.11:30000", "b": "http://10.77.0.13:30000"}
MODEL_DIR = "/srv/sparkctl-model/groups"
CACHE = "/var/lib/sparkctl/models"
SOURCE = ["-e", "model_cache_source=head", "-e", f"model_cache_head_dir={MODEL_DIR}"]
# the model, and the roles that read groups
REGROUP = ["-t", "model_cache", "-t", "sglang", "-t", "monitoring"]


@pytest.fixture(scope="module")
def two_groups(
    lab: LabSession, provisioned: dict[str, object], request: pytest.FixtureRequest
) -> Iterator[None]:
    sparkctl("lab", "model", "--size", "16MiB", "--files", "2", "--dir", MODEL_DIR, check=True)
    proc = sparkctl("provision", str(TWO), *SOURCE, *REGROUP, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    yield
    sparkctl("serve", "down", str(TWO))
    for node in lab.inventory.nodes:
        ssh(node.mgmt_ip, f"rm -rf {CACHE} /srv/sparkctl-model", check=False)
    # one group of four again, for whatever runs next (the whole suite: nothing but the
    # lab's teardown, which only removes it)
    if needed_after(request):
        back = sparkctl("provision", str(SIM_INVENTORY), *REGROUP, timeout=1800)
        assert back.returncode == 0, back.stderr[-4000:]


def test_each_group_runs_its_own_rendezvous(lab: LabSession, two_groups: None) -> None:
    for name, head_ip in (("spark2", "192.168.100.11"), ("spark4", "192.168.100.13")):
        line = ssh(
            lab.inventory.node(name).mgmt_ip,
            "systemctl show -p ExecStart --value sparkctl-sglang.service",
        ).stdout
        assert "--tp-size 2 --nnodes 2 --node-rank 1" in line, line
        assert f"--dist-init-addr {head_ip}:" in line, line


def test_both_groups_serve_and_verify(two_groups: None) -> None:
    up = sparkctl("serve", "up", str(TWO), "--restart", timeout=900)
    assert up.returncode == 0, up.stderr[-4000:]
    assert "10.77.0.11:30000/v1" in up.stdout and "10.77.0.13:30000/v1" in up.stdout
    proc = sparkctl("serve", "verify", str(TWO), "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    info = {c["host"]: c["message"] for c in report["checks"] if c["check"] == "server_info"}
    assert set(info) == {"spark1", "spark3"}
    assert all(m.startswith("tp_size 2, nnodes 2") for m in info.values()), info
    ranks = {(c["host"], c["subject"]) for c in report["checks"] if c["check"] == "rank_running"}
    assert ranks == {
        ("spark1", "rank 0"),
        ("spark2", "rank 1"),
        ("spark3", "rank 0"),
        ("spark4", "rank 1"),
    }
    # Each group's endpoint answers a one-token generation (the last validate's verdict,
    # which other modules' faults may have left failed, is not this test's concern).
    status = json.loads(sparkctl("status", str(TWO), "--json").stdout)
    assert [(g["group"], g["head"], g["probe_ok"]) for g in status["groups"]] == [
        ("a", "spark1", True),
        ("b", "spark3", True),
    ], status["problems"]
    assert not [p for p in status["problems"] if "rank" in p or "group" in p], status["problems"]
    # the gateway in front of both (sim-two-groups.ini, [sparks:vars]): each head in
    # its rotation, chats through it answered, the key required
    for line in ("group a (spark1) in the gateway's rotation", "group b (spark3) in the"):
        assert line in up.stdout, up.stdout[-3000:]
    gateway = {(c["check"], c["subject"]): c for c in report["checks"] if c["host"] == "spark1"}
    for check in (("gateway_rotation", "group a"), ("gateway_rotation", "group b")):
        assert gateway[check]["outcome"] == "passed", gateway[check]
        assert "(sglang, serving " in gateway[check]["message"], gateway[check]
    assert gateway[("gateway_chat", None)]["outcome"] == "passed", gateway
    assert gateway[("gateway_chat", None)]["message"].startswith("4 of 4 chat completions")
    assert gateway[("gateway_api_key", None)]["message"] == "without the key: HTTP 401"
    assert [g["gateway"] for g in status["groups"]] == ["ready", "ready"], status["groups"]
    assert status["gateway"] == f"{GATEWAY}/v1" and not status["gateway_error"], status


def test_the_lab_prometheus_scrapes_each_groups_head_with_its_group(
    lab: LabSession, two_groups: None
) -> None:
    """Regrouped by provision's monitoring role: one SGLang target per group head
    (spark1 for a, spark3 for b), labelled with its group, both up while both serve
    (after test_both_groups_serve_and_verify)."""
    port = SGLANG_PORT
    want = {
        "a": f"{lab.inventory.node('spark1').mgmt_ip}:{port}",
        "b": f"{lab.inventory.node('spark3').mgmt_ip}:{port}",
    }

    def heads() -> dict[str, str]:
        sglang = [t for t in targets(lab) if t["labels"]["job"] == "sglang"]
        got = {t["labels"]["group"]: t["labels"]["instance"] for t in sglang}
        assert got == want, got
        return got if all(t["health"] == "up" for t in sglang) else {}

    wait_for("both heads scraped up", heads)

    # A target turns up before its scrape's samples are committed (Prometheus sets the
    # health in report(), ahead of the appender's Commit, scrape/scrape.go), and SGLang's
    # scheduler gauges have no series until its first log_stats (metrics_collector.py:1286):
    # each group's series comes within a scrape or two of its head being up.
    def groups() -> set[str]:
        query = 'sum by (group) (sglang:num_running_reqs{job="sglang"})'
        result = api(lab, "/api/v1/query", query=query)
        got = {s["metric"]["group"] for s in result["result"]}
        assert got <= {"a", "b"}, got
        return got if got == {"a", "b"} else set()

    wait_for("a num_running_reqs series for each group", groups)


def test_a_stopped_rank_is_named_with_its_group(lab: LabSession, two_groups: None) -> None:
    ssh(lab.inventory.node("spark4").mgmt_ip, "systemctl stop sparkctl-sglang.service")
    proc = sparkctl("serve", "verify", str(TWO), "--json", timeout=600)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    failed = {(c["check"], c["host"]) for c in report["checks"] if c["outcome"] == "failed"}
    assert ("rank_running", "spark4") in failed
    # group a does not depend on group b: it still answers
    healthy = {
        c["host"] for c in report["checks"] if c["check"] == "health" and c["outcome"] == "passed"
    }
    assert healthy == {"spark1"}


def _gateway() -> Gateway:
    """The lab gateway's control plane, with the key provision generated."""
    key = (STATE / "clusters" / "sim" / "secrets" / "sglang-api-key").read_text().strip()
    return Gateway(GATEWAY, key)


def _watch_once() -> list[dict[str, Any]]:
    proc = sparkctl("serve", "watch", str(TWO), "--once", "--json", timeout=1200)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]


class _Rotation:
    """Group b's place in the gateway's rotation, read every second on a thread of its own
    (a watchdog round takes tens of seconds); and, while b is out, chats through the
    gateway every two seconds, counted."""

    def __init__(self, gw: Gateway, model: str) -> None:
        self.gw, self.model = gw, model
        self.began = time.monotonic()
        self.left: float | None = None  # first seen out of rotation, after the freeze
        self.back: float | None = None  # first seen ready again, after that
        self.answered = self.failed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        last_chat = 0.0
        while not self.stop.is_set():
            now = time.monotonic() - self.began
            worker = self.gw.find(HEADS["b"])
            ready = worker is not None and worker.ready
            if self.left is None and not ready:
                self.left = now
            elif self.left is not None and self.back is None and ready:
                self.back = now
            if self.left is not None and self.back is None and now - last_chat >= 2:
                last_chat = now
                ok = chat(GATEWAY, str(self.gw.key), self.model).status_code == 200
                self.answered += ok
                self.failed += not ok
            self.stop.wait(1.0)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=120)


@pytest.mark.fault
def test_a_frozen_group_leaves_the_gateway_and_rejoins_after_the_watchdogs_restart(
    lab: LabSession, two_groups: None
) -> None:
    """Group b's rank 1 frozen (SIGSTOP of its container): the gateway's own health
    checks (one-token generations through the group, every 30 s, out after two
    failures) or the watchdog, whichever is first, take group b out of rotation; the
    one endpoint keeps answering from group a meanwhile (every chat through it while b
    is out answers). `serve watch --once` rounds every 15 s restart group b (out of
    rotation first, then every rank) and the next healthy round registers it again.
    The times are printed for docs/benchmarks.md."""
    from tests.lab.test_serve import _freeze_container  # noqa: PLC0415

    up = sparkctl("serve", "up", str(TWO), timeout=900)  # both serving, both in rotation
    assert up.returncode == 0, up.stderr[-4000:]
    gw = _gateway()
    workers = gw.workers()
    assert {w.url: w.status for w in workers} == dict.fromkeys(HEADS.values(), "ready")
    (STATE / "results" / "sim" / "watch-state.json").unlink(missing_ok=True)
    spark4 = lab.inventory.node("spark4").mgmt_ip
    tree = _freeze_container(spark4)
    rotation = _Rotation(gw, workers[0].models[0])
    restarted: float | None = None
    try:
        try:
            for _ in range(24):  # the watchdog decides within about 4 rounds
                events = _watch_once()
                if any(e["group"] == "b" and e["decision"] == "restart_group" for e in events):
                    restarted = time.monotonic() - rotation.began
                    break
                assert not [e for e in events if e["group"] == "a" and e["decision"] != "healthy"]
                time.sleep(15)
        finally:
            ssh(spark4, f"kill -CONT {tree} 2>/dev/null; true", check=False)
        assert restarted is not None, "the watchdog did not restart group b"
        for _ in range(8):
            _watch_once()
            if rotation.back is not None:
                break
            time.sleep(5)
    finally:
        rotation.close()
    assert rotation.left is not None and rotation.back is not None, (rotation.left, rotation.back)
    assert rotation.left <= restarted + 1 and rotation.back >= rotation.left
    assert rotation.failed == 0 and rotation.answered > 0, (rotation.answered, rotation.failed)
    recorded = (STATE / "results" / "sim" / "watch-events.jsonl").read_text().splitlines()
    actions = [json.loads(ln)["action"] for ln in recorded if '"group": "b"' in ln]
    assert "rejoin" in actions[-3:], actions[-6:]
    assert {w.url: w.status for w in gw.workers()} == dict.fromkeys(HEADS.values(), "ready")
    print(
        f"\ngroup b frozen: out of the gateway's rotation after {rotation.left:.0f} s, "
        f"restarted by the watchdog after {restarted:.0f} s (its round over), back in "
        f"rotation after {rotation.back:.0f} s; through the gateway meanwhile "
        f"{rotation.answered} requests answered, {rotation.failed} failed"
    )


def chat(base_url: str, key: str, model: str) -> Any:
    return httpx.post(
        f"{base_url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )


# ------------------------------------------------------------------ serve upgrade
# Another release of the stand-in's image (its own digest in every node's registry), one
# that cannot start (no SGLang package), and a second model revision made beside the
# first: the same sizes, so the same config.json, so the same greedy answers.
NEW_IMAGE = "lmsysorg/sglang:v0.5.18-cu130-runtime"
BROKEN_IMAGE = "lmsysorg/sglang:v0.5.19-cu130-runtime"
REVISION = "/srv/sparkctl-model/groups-r2"
GOLDEN = json.dumps(
    {
        "sglang_golden_prompts": [
            {"prompt": "What does tensor parallelism split across the ranks?", "same": True},
            {"prompt": "Name one collective operation.", "same": True, "max_tokens": 16},
        ]
    }
)
RECORD = "/etc/sparkctl/sglang-version"
UNIT = "sparkctl-sglang.service"


@pytest.fixture(scope="module")
def releases(lab: LabSession, two_groups: None) -> dict[str, str]:
    """REF@DIGEST of the new and the broken image, published by `sparkctl lab image`;
    the revision made on the head; and what spark1 runs before any upgrade."""
    out = {"before": _runs(lab, "spark1")[0]}
    for name, ref, extra in (
        ("new", NEW_IMAGE, ["--variant", "v0.5.18"]),
        ("broken", BROKEN_IMAGE, ["--broken"]),
    ):
        proc = sparkctl("lab", "image", ref, *extra, "--json", check=True)
        out[name] = f"{ref}@{json.loads(proc.stdout)['digest']}"
    sparkctl("lab", "model", "--size", "16MiB", "--files", "2", "--dir", REVISION, check=True)
    return out


def _runs(lab: LabSession, node: str) -> tuple[str, str]:
    """(image, model directory) the node's unit runs: its version record and its link."""
    ip = lab.inventory.node(node).mgmt_ip
    image = ssh(ip, f"sed -n 's/^SGLANG_IMAGE=//p' {RECORD}").stdout.strip()
    model = ssh(ip, f"readlink -f {CACHE}/current").stdout.strip()
    return image, model


def _upgrade(image: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    ref, _, digest = image.partition("@")
    proc = sparkctl(
        "serve",
        "upgrade",
        str(TWO),
        *SOURCE[:2],
        "-e",
        f"model_cache_head_dir={REVISION}",
        "-e",
        f"sglang_image={ref}",
        "-e",
        f"sglang_image_digest={digest}",
        "-e",
        GOLDEN,
        *extra,
        "--json",
        timeout=1800,
    )
    try:
        return proc, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(proc.stdout[-3000:] + proc.stderr[-4000:]) from None


def test_the_disk_check_refuses_a_revision_that_does_not_fit_beside_the_serving_one(
    lab: LabSession, releases: dict[str, str]
) -> None:
    """A node whose disk holds the serving revision and not also the new one (here: the
    space kept free, model_cache_free_margin_mb, leaves less than the new revision): the
    staging stops before anything is copied, naming the node, and nothing that serves
    changes."""
    spark2 = lab.inventory.node("spark2").mgmt_ip
    free_mb = int(ssh(spark2, f"df -B1M --output=avail {CACHE} | tail -1").stdout.strip())
    before = {n: _runs(lab, n) for n in ("spark1", "spark2", "spark3", "spark4")}
    # 16 MiB to copy, 8 MiB left above the margin: it does not fit
    proc, result = _upgrade(
        releases["new"], "-e", f"model_cache_free_margin_mb={free_mb - 8}", "--stage-only"
    )
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert not result["staged"] and result["groups"] == [], result
    assert "staging failed, nothing that serves was touched" in result["error"], result["error"]
    out = proc.stdout + proc.stderr
    assert "spark2: the model needs" in out or "spark2" in result["error"], out[-3000:]
    # nothing copied (the role may have made the revision's empty directory)
    copied = ssh(spark2, f"find {CACHE}/groups-r2 -type f 2>/dev/null | wc -l").stdout.strip()
    assert copied == "0", copied
    assert {n: _runs(lab, n) for n in before} == before


@pytest.mark.fault
def test_an_image_that_cannot_start_is_rolled_back_and_the_previous_version_serves(
    lab: LabSession, releases: dict[str, str]
) -> None:
    """Group b moved to an image without SGLang: its swap fails (the role runs the new
    image's server, which exits with "No module named sglang.launch_server"), the
    previous image and model link are put back, started and verified, and the command
    exits 1 saying so. Group a is not touched; both groups stay in the rotation."""
    before = {n: _runs(lab, n) for n in ("spark1", "spark2", "spark3", "spark4")}
    proc, result = _upgrade(releases["broken"], "--group", "b")
    assert proc.returncode == 1, proc.stderr[-4000:]
    (b,) = result["groups"]
    assert (b["group"], b["decision"], b["rollback_ok"]) == ("b", "rollback", True), b
    assert "No module named sglang.launch_server" in b["reason"], b["reason"]
    assert "group b was rolled back" in proc.stderr and "serves again" in proc.stderr
    assert {n: _runs(lab, n) for n in before} == before
    verify = sparkctl("serve", "verify", str(TWO), "--json", timeout=600)
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]
    assert {w.url: w.status for w in _gateway().workers()} == dict.fromkeys(HEADS.values(), "ready")
    print(f"\nbroken image on group b: rolled back, down {b['rollback_downtime_s']} s")


@pytest.mark.fault
def test_a_rolling_upgrade_answers_every_request_and_rolls_back_only_the_failing_group(
    lab: LabSession, releases: dict[str, str]
) -> None:
    """The new image and revision, staged first (--stage-only); then spark4's staged copy
    of the revision is corrupted keeping size and mtime (a bad disk that the quick check
    trusts, as documented). `serve upgrade` moves group a (out of the gateway, drained,
    swapped, gated, back) and then group b, whose golden answers (same: true) now differ
    from its previous version's: b alone is rolled back, a keeps the new version. A
    client sends a chat through the gateway every half second the whole time: none
    fails. The counts and the swap's downtime are printed for docs/benchmarks.md."""
    stage, _ = _upgrade(releases["new"], "--stage-only")
    assert stage.returncode == 0, stage.stderr[-4000:]
    spark4 = lab.inventory.node("spark4").mgmt_ip
    config = f"{CACHE}/groups-r2/config.json"
    # One byte of a string value (the model's name), so the JSON still parses and the
    # preflight's memory check passes, while the stand-in's weights, keyed by the file's
    # hash, give other answers: corruption only the golden check can see.
    name = (REPO / "lab" / "sparkctl_lab" / "assets" / "model-config.json").read_text()
    corrupt_in_place(spark4, config, name.index("meta-llama") + 2, "X")
    gw = _gateway()
    loop = _Loop(gw, gw.workers()[0].models[0])
    try:
        proc, result = _upgrade(releases["new"])
    finally:
        loop.close()
    assert proc.returncode == 1, proc.stderr[-4000:]
    a, b = result["groups"]
    assert (a["group"], a["decision"]) == ("a", "keep"), a
    assert (b["group"], b["decision"], b["rollback_ok"]) == ("b", "rollback", True), b
    assert b["reason"].startswith("golden (golden 1) failed"), b["reason"]
    assert "differs from the previous version's" in b["reason"], b["reason"]
    assert a["drained"] and b["drained"]
    assert _runs(lab, "spark1") == (releases["new"], REVISION)
    assert _runs(lab, "spark2") == (releases["new"], f"{CACHE}/groups-r2")
    assert _runs(lab, "spark3")[0] == releases["before"]
    assert _runs(lab, "spark4") == (releases["before"], f"{CACHE}/groups")
    assert "group(s) a keep the new version" in proc.stderr, proc.stderr[-3000:]
    assert loop.failed == [], loop.failed[:5]
    assert loop.sent > 0 and loop.during["a"] > 0 and loop.during["b"] > 0, loop.during
    assert {w.url: w.status for w in gw.workers()} == dict.fromkeys(HEADS.values(), "ready")
    # Old revisions go only beside a serving one that passed a verify: group a's old one
    # on spark2 (the new one passed the upgrade's gate). Group b serves its old revision
    # again and keeps the inventory's new one, staged; the head reads its copy in place.
    pruned = sparkctl(
        "model", "prune", str(TWO), *SOURCE[:2], "-e", f"model_cache_head_dir={REVISION}", "--json"
    )
    assert pruned.returncode == 0, pruned.stdout[-2000:] + pruned.stderr[-3000:]
    gone = {(r["node"], r["path"]) for r in json.loads(pruned.stdout)["removed"]}
    assert ("spark2", f"{CACHE}/groups") in gone, gone
    kept = [g for g in gone if g[0] != "spark2" and g[1].endswith(("/groups-r2", "/groups"))]
    assert not kept and not [g for g in gone if g[0] == "spark1"], gone
    left = ssh(lab.inventory.node("spark2").mgmt_ip, f"test -d {CACHE}/groups", check=False)
    assert left.returncode == 1
    print(
        f"\nrolling upgrade: group a down {a['downtime_s']} s (drained {a['drain_s']} s), "
        f"group b down {b['downtime_s']} s then rolled back in {b['rollback_downtime_s']} s; "
        f"through the gateway {loop.sent} requests sent, {len(loop.failed)} failed; "
        f"{loop.during['a']} sent while group a was out of rotation, {loop.during['b']} "
        f"while b was, {loop.during['both']} with both in"
    )


class _Loop:
    """A client of the gateway: a chat every half second, each counted with which group
    was out of the rotation when it was sent (read from the gateway just before)."""

    def __init__(self, gw: Gateway, model: str) -> None:
        self.gw, self.model = gw, model
        self.sent = 0
        self.failed: list[str] = []
        self.during = {"a": 0, "b": 0, "both": 0}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                ready = {w.url for w in self.gw.workers() if w.ready}
            except Exception:
                ready = set(HEADS.values())
            out = [g for g, url in HEADS.items() if url not in ready]
            try:
                resp = chat(GATEWAY, str(self.gw.key), self.model)
                if resp.status_code != 200:
                    self.failed.append(f"HTTP {resp.status_code}: {resp.text[:120]}")
            except httpx.HTTPError as exc:
                self.failed.append(f"{type(exc).__name__}: {exc}")
            self.sent += 1
            self.during[out[0] if len(out) == 1 else "both"] += 1
            self.stop.wait(0.5)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=120)
