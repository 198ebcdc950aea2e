"""Per-node checks: one case per check, node, interface, binary.

Each check reads live state over the node's one SSH connection and compares
it with the plan (what the inventory and the roles' defaults imply). Messages
name what was seen and what was expected; the node and interface are in the
test id and the report's host/subject.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from sparkctl import tool_output
from sparkctl.checks.conftest import as_root
from sparkctl.checks.state import mark_down
from sparkctl.plan import NodePlan, Plan, Twin, ValidatePlan

GiB = 1 << 30
MiB = 1 << 20


def _twin(nplan: NodePlan, twin: str) -> Twin:
    return nplan.roce_fabric.twin(twin)


def _env_diff(actual: dict[str, str], expected: dict[str, str]) -> list[str]:
    """What differs, one phrase per variable (missing, unexpected, other value)."""
    diff = [f"{k} missing (want {expected[k]!r})" for k in sorted(expected.keys() - actual.keys())]
    diff += [f"{k}={actual[k]!r} not expected" for k in sorted(actual.keys() - expected.keys())]
    diff += [
        f"{k}={actual[k]!r}, want {expected[k]!r}"
        for k in sorted(actual.keys() & expected.keys())
        if str(actual[k]) != str(expected[k])
    ]
    return diff


def _run(host: Any, argv: list[str], timeout: int = 30) -> Any:
    """One command, bounded: a hung tool fails its check instead of the run.

    testinfra's ssh backend raises on exit 255, taking it for its own ssh
    failing; a command that is itself ssh (cluster_ssh) exits 255 too, so the
    result is returned and the check reports ssh's own last line."""
    try:
        return host.run(shlex.join(["timeout", str(timeout), *argv]))
    except RuntimeError as exc:
        result = exc.args[0] if exc.args else None
        if hasattr(result, "rc") and hasattr(result, "stderr"):
            return result
        raise


def test_reachable(request: pytest.FixtureRequest, host: Any, node: str, seen: Any) -> None:
    try:
        out = host.run("uname -n")
    except RuntimeError as exc:  # testinfra's ssh backend: ssh itself failed (exit 255)
        result = exc.args[0] if exc.args else exc
        why = (getattr(result, "stderr", "") or str(result)).strip().splitlines()
        mark_down(request.config, node, why[-1] if why else "ssh failed")
        raise AssertionError(
            f"{node} does not answer over SSH: {why[-1] if why else 'ssh failed'}"
        ) from None
    assert out.rc == 0, f"uname -n: rc {out.rc}: {out.stderr.strip()}"
    seen(f"answers as {out.stdout.strip()}")


# ------------------------------------------------------------------ GPU
def test_gpu(host: Any, nplan: NodePlan, seen: Any) -> None:
    want = nplan.nvidia_driver
    out = _run(host, ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv"])
    assert out.rc == 0, f"nvidia-smi: rc {out.rc}: {(out.stdout + out.stderr).strip()[:200]}"
    gpus = tool_output.nvidia_smi_csv(out.stdout, ["name", "driver_version"])
    assert gpus, "nvidia-smi listed no GPU"
    names = [str(g["name"]) for g in gpus]
    drivers = [str(g["driver_version"]) for g in gpus]
    assert any(want.gpu in n for n in names), f"GPU {names}, want a {want.gpu}"
    low = [d for d in drivers if not tool_output.at_least(d, want.min_driver)]
    assert not low, f"driver {low[0]} is older than the minimum {want.min_driver}"
    seen(f"{names[0]}, driver {drivers[0]} >= {want.min_driver}")


def test_cuda(host: Any, nplan: NodePlan, seen: Any) -> None:
    want = nplan.nvidia_driver.min_cuda
    out = _run(host, ["nvidia-smi"])
    assert out.rc == 0, f"nvidia-smi: rc {out.rc}: {(out.stdout + out.stderr).strip()[:200]}"
    cuda = tool_output.nvidia_smi_cuda(out.stdout)
    assert tool_output.at_least(cuda, want), f"CUDA {cuda} is older than the minimum {want}"
    seen(f"CUDA {cuda} >= {want}")


# ------------------------------------------------------------------ fabric twins
def test_twin_up(host: Any, nplan: NodePlan, twin: str, facts: dict[str, Any], seen: Any) -> None:
    netdev = _twin(nplan, twin).netdev
    iface = host.interface(netdev)
    assert iface.exists, f"{netdev} does not exist"
    state = host.file(f"/sys/class/net/{netdev}/operstate").content_string.strip()
    carrier = host.run(f"cat /sys/class/net/{shlex.quote(netdev)}/carrier").stdout.strip()
    facts.setdefault("mac", {})[twin] = host.file(
        f"/sys/class/net/{netdev}/address"
    ).content_string.strip()
    assert state == "up" and carrier == "1", (
        f"{netdev} is {state} (carrier {carrier or 'unknown'}): cable, switch port or link down"
    )
    seen(f"{netdev} up")


def test_twin_address(
    host: Any, nplan: NodePlan, twin: str, facts: dict[str, Any], seen: Any
) -> None:
    spec = _twin(nplan, twin)
    out = host.run("ip -j -4 addr show")
    assert out.rc == 0, f"ip addr show: {out.stderr.strip()}"
    every = tool_output.ip_addr(out.stdout)
    facts["addresses"] = every  # all interfaces: the cluster's duplicate-address check
    have = every.get(spec.netdev, [])
    assert spec.address in have, (
        f"{spec.netdev} has {', '.join(have) or 'no IPv4 address'}, want {spec.address}"
    )
    extra = [a for a in have if a != spec.address]
    assert not extra, f"{spec.netdev} also has {', '.join(extra)} (want only {spec.address})"
    seen(f"{spec.netdev} {spec.address}")


def test_twin_mtu(host: Any, nplan: NodePlan, twin: str, seen: Any) -> None:
    netdev = _twin(nplan, twin).netdev
    want = nplan.roce_fabric.mtu
    text = host.run(f"cat /sys/class/net/{shlex.quote(netdev)}/mtu").stdout.strip()
    have = int(text) if text.isdigit() else -1
    assert have == want, f"{netdev} MTU {have}, want {want}"
    seen(f"{netdev} MTU {have}")


def test_twin_speed(host: Any, nplan: NodePlan, twin: str, seen: Any) -> None:
    netdev = _twin(nplan, twin).netdev
    want = nplan.roce_fabric.speed_mbps
    text = host.run(f"cat /sys/class/net/{shlex.quote(netdev)}/speed").stdout.strip()
    have = int(text) if text.lstrip("-").isdigit() else -1
    hint = " (negotiated down: force the switch port to full speed)" if 0 < have < want else ""
    assert have == want, (
        f"{netdev} speed {have if have > 0 else 'unknown'} Mb/s, want {want} Mb/s{hint}"
    )
    seen(f"{netdev} {have} Mb/s")


def test_roce_device(host: Any, nplan: NodePlan, twin: str, seen: Any) -> None:
    spec = _twin(nplan, twin)
    out = _run(host, ["ibdev2netdev"])
    assert out.rc == 0, f"ibdev2netdev: rc {out.rc}: {out.stderr.strip()[:200]}"
    mapping = {
        row["ibdev"]: (row["netdev"], row["state"]) for row in tool_output.ibdev2netdev(out.stdout)
    }
    assert spec.ibdev in mapping, (
        f"no RoCE device {spec.ibdev} (have {', '.join(sorted(mapping)) or 'none'})"
    )
    netdev, state = mapping[spec.ibdev]
    assert netdev == spec.netdev, f"{spec.ibdev} maps to {netdev}, want {spec.netdev}"
    assert state == "Up", f"{spec.ibdev} ({netdev}) is {state}"
    seen(f"{spec.ibdev} -> {netdev} Up")


def test_roce_port(host: Any, plan: Plan, nplan: NodePlan, twin: str, seen: Any) -> None:
    """The twin's RDMA port as the verbs library sees it (``ibv_devinfo``): PORT_ACTIVE with
    link layer Ethernet, i.e. RoCE, where NCCL and ib_write_bw open it. Only on a profile
    whose hardware has RDMA (cluster_hw.rdma): a lab node has no verbs device to ask."""
    if not plan.cluster_hw.get("rdma"):
        pytest.skip(
            f"no RDMA devices on the {plan.hw_profile} profile (cluster_hw.rdma is not true)"
        )
    spec = _twin(nplan, twin)
    ibdev = spec.ibdev
    out = _run(host, ["ibv_devinfo"])
    missing = " (ibv_devinfo is in Ubuntu's ibverbs-utils, from rdma-core)" if out.rc == 127 else ""
    assert out.rc == 0, (
        f"ibv_devinfo: rc {out.rc}: {(out.stderr or out.stdout).strip()[:200]}{missing}"
    )
    devices = {d["hca_id"]: d for d in tool_output.ibv_devinfo(out.stdout)}
    assert ibdev in devices, f"ibv_devinfo lists no {ibdev} (have {', '.join(devices) or 'none'})"
    # A ConnectX-7 function has one port (phys_port_cnt 1), port 1 as in ibdev2netdev.
    port = next((p for p in devices[ibdev]["ports"] if p["port"] == 1), None)
    assert port is not None, f"{ibdev} has no port 1 in ibv_devinfo"
    assert port.get("state") == "PORT_ACTIVE", (
        f"{ibdev} port 1 ({spec.netdev}) is {port.get('state', 'in no state')}, "
        "want PORT_ACTIVE: no link, or the port is not up for RDMA"
    )
    assert port.get("link_layer") == "Ethernet", (
        f"{ibdev} port 1 link layer {port.get('link_layer', 'unknown')}, want Ethernet: "
        "RoCE needs the ConnectX-7 port in Ethernet mode"
    )
    seen(f"{ibdev} port 1 PORT_ACTIVE, Ethernet, active MTU {port.get('active_mtu', '?')}")


# ------------------------------------------------------------------ NCCL
def test_nccl_env(host: Any, nplan: NodePlan, seen: Any) -> None:
    want = nplan.nccl
    expected = {k: str(v) for k, v in want.env.items()}
    with as_root(host):
        env_text = host.file(want.env_file).content_string
        if expected.get("NCCL_IB_GID_INDEX") == want.gid_placeholder:
            record = tool_output.env_file(host.file(want.record_file).content_string)
            assert record.get("ROCE_GID_INDEX"), (
                f"{want.record_file} has no ROCE_GID_INDEX (provision the roce_fabric role)"
            )
            expected["NCCL_IB_GID_INDEX"] = record["ROCE_GID_INDEX"]
        conf_text = host.file(want.conf_file).content_string
    diff = _env_diff(tool_output.env_file(env_text), expected)
    assert not diff, f"{want.env_file}: {'; '.join(diff)}"
    nccl_only = {k: v for k, v in expected.items() if k.startswith("NCCL_")}
    diff = _env_diff(tool_output.env_file(conf_text), nccl_only)
    assert not diff, f"{want.conf_file}: {'; '.join(diff)}"
    seen(
        f"{len(expected)} variables as the inventory implies "
        f"(NCCL_IB_GID_INDEX={expected.get('NCCL_IB_GID_INDEX')})"
    )


def test_nccl_tests_binary(host: Any, nplan: NodePlan, binary: str, seen: Any) -> None:
    path = f"{nplan.nccl.tests_dir}/{binary}"
    f = host.file(path)
    assert f.exists, f"{path} is missing"
    assert f.mode & 0o111, f"{path} is not executable (mode {f.mode:o})"
    seen(path)


def test_mpirun(host: Any, seen: Any) -> None:
    out = _run(host, ["mpirun", "--version"])
    assert out.rc == 0, f"mpirun --version: rc {out.rc}: {(out.stderr or out.stdout).strip()[:200]}"
    seen(out.stdout.strip().splitlines()[0] if out.stdout.strip() else "mpirun")


def test_cluster_ssh(host: Any, plan: Plan, nplan: NodePlan, peer: str, seen: Any) -> None:
    """As the cluster user with the cluster key only, over fabric a (mpirun's path), with
    strict host key checking."""
    user = nplan.base.cluster_user
    address = plan.node(peer).fabric_a_ip
    key = f"~/.ssh/{nplan.base.key_name}"  # ssh expands ~ in IdentityFile itself
    argv = [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"IdentityFile={key}",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "ConnectTimeout=5",
        "--",
        address,
        "true",
    ]
    if host.user.name != user:
        argv = ["sudo", "-n", "-u", user, "-H", *argv]
    out = _run(host, argv, timeout=10)
    why = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
    if out.rc == 124:
        why = "no answer within 10 s (a path that drops large packets stalls the key exchange)"
    assert out.rc == 0, f"ssh {user}@{peer} ({address}): rc {out.rc}: {why}"
    seen(f"{user} -> {peer} ({address})")


# ------------------------------------------------------------------ clock
def test_clock(host: Any, nplan: NodePlan, settings: ValidatePlan, seen: Any) -> None:
    out = _run(host, ["chronyc", "-n", "tracking"])
    assert out.rc == 0, f"chronyc tracking: rc {out.rc}: {out.stderr.strip()[:200]}"
    track = tool_output.chronyc_tracking(out.stdout)
    limit_ms = settings.clock_max_offset_ms
    offset_s = float(track["offset_s"])
    assert track["leap"] == "Normal", f"chronyd: leap status {track['leap']!r} (not synchronised)"
    assert track["reference"] != "00000000", "chronyd has no reference (not synchronised)"
    assert abs(offset_s) * 1000 <= limit_ms, (
        f"clock {offset_s * 1000:+.1f} ms from its reference (limit {limit_ms:g} ms)"
    )
    seen(f"offset {offset_s * 1e6:+.0f} us, stratum {track['stratum']}")


# ------------------------------------------------------------------ model and service
def _model_check(host: Any, nplan: NodePlan, facts: dict[str, Any]) -> dict[str, Any]:
    import json  # noqa: PLC0415

    if "model_check" not in facts:
        m = nplan.model_cache
        argv = [
            m.relay,
            "check",
            m.root,
            "--manifest",
            m.manifest,
            "--state",
            m.state,
            "--link",
            m.link,
            "--read-only",
        ]
        with as_root(host):
            out = _run(host, argv, timeout=600)
        assert out.rc == 0, f"{m.relay} check: {(out.stderr or out.stdout).strip()[-300:]}"
        facts["model_check"] = json.loads(out.stdout)
    return dict(facts["model_check"])


def test_model_cache(host: Any, nplan: NodePlan, facts: dict[str, Any], seen: Any) -> None:
    m = nplan.model_cache
    if m.source == "none":
        pytest.skip("no model configured (model_cache_source: none)")
    have = _model_check(host, nplan, facts)
    broken = have["missing"] + have["bad"]
    assert not broken, (
        f"{m.root}: {len(have['missing'])} missing, {len(have['bad'])} "
        f"damaged of {have['files']} files (first: {broken[0]}); "
        "run `sparkctl model sync`"
    )
    assert have.get("link_target") == m.root, (
        f"{m.link} points at {have.get('link_target')}, want {m.root}"
    )
    seen(f"{have['files']} files, {have['total_bytes'] / GiB:.2f} GiB match the manifest")


def test_sglang_unit(host: Any, nplan: NodePlan, facts: dict[str, Any], seen: Any) -> None:
    unit = nplan.sglang.unit
    out = host.run(
        f"systemctl show -p LoadState,UnitFileState,ActiveState,MemoryCurrent {shlex.quote(unit)}"
    )
    props = tool_output.systemctl_show(out.stdout)
    facts["sglang"] = props
    assert props.get("LoadState") == "loaded", (
        f"{unit} is not installed (LoadState {props.get('LoadState', '?')})"
    )
    seen(f"{unit} loaded, {props.get('ActiveState', '?')}")


def test_memory(
    host: Any, nplan: NodePlan, settings: ValidatePlan, facts: dict[str, Any], seen: Any
) -> None:
    """Room for this node's share of the weights plus headroom (SGLang's own use counts as room)."""
    mem = tool_output.meminfo(host.file("/proc/meminfo").content_string)
    facts["mem_available"] = mem["MemAvailable"]
    available = mem["MemAvailable"]
    props = tool_output.systemctl_show(
        host.run(
            f"systemctl show -p ActiveState,MemoryCurrent {shlex.quote(nplan.sglang.unit)}"
        ).stdout
    )
    if props.get("ActiveState") == "active" and props.get("MemoryCurrent", "").isdigit():
        available += int(props["MemoryCurrent"])
    share = 0
    if nplan.model_cache.source != "none":
        model = _model_check(host, nplan, facts)
        share = int(model["total_bytes"]) // max(1, nplan.sglang.nnodes)
    need = share + settings.mem_headroom_mb * MiB
    assert available >= need, (
        f"{available / GiB:.1f} GiB available, need {need / GiB:.1f} GiB "
        f"({share / GiB:.1f} GiB of weights + "
        f"{settings.mem_headroom_mb} MiB headroom)"
    )
    seen(f"{available / GiB:.1f} GiB available >= {need / GiB:.1f} GiB")


def test_disk(
    host: Any, nplan: NodePlan, settings: ValidatePlan, facts: dict[str, Any], seen: Any
) -> None:
    m = nplan.model_cache
    headroom = settings.disk_headroom_mb * MiB
    if m.source != "none":
        model = _model_check(host, nplan, facts)
        free, need = int(model["free_bytes"]), int(model["need_bytes"]) + headroom
        what = f"{int(model['need_bytes']) / GiB:.1f} GiB of model still to copy + headroom"
    else:
        out = host.run("df -P -B1 " + shlex.quote(m.dir) + " 2>/dev/null || df -P -B1 /")
        free = int(out.stdout.splitlines()[-1].split()[3])
        need, what = headroom, "headroom"
    assert free >= need, (
        f"{free / GiB:.1f} GiB free for {m.dir}, need {need / GiB:.1f} GiB ({what})"
    )
    seen(f"{free / GiB:.1f} GiB free")
