"""Per-node checks: one case per check, node, interface, binary.

Each check reads live state over the node's one SSH connection and compares
it with the plan (what the inventory and the roles' defaults imply). Messages
name what was seen and what was expected; the node and interface are in the
test id and the report's host/subject.
"""

from __future__ import annotations

import fnmatch
import shlex
from typing import Any

import pytest

from sparkctl.checks.conftest import as_root
from sparkctl.checks.state import mark_down
from sparkctl.collection import tool_output
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


def test_compute_cap(host: Any, plan: Plan, seen: Any) -> None:
    """Every GPU's compute capability is the profile's (cluster_hw.compute_capability: 12.1
    on a GB10, the sm_121 the CUDA code is built for)."""
    want = str(plan.cluster_hw.get("compute_capability") or "")
    if not want:
        pytest.skip(f"the {plan.hw_profile} profile names no cluster_hw.compute_capability")
    out = _run(host, ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])
    assert out.rc == 0, f"nvidia-smi: rc {out.rc}: {(out.stdout + out.stderr).strip()[:200]}"
    caps = [str(g["compute_cap"]) for g in tool_output.nvidia_smi_csv(out.stdout, ["compute_cap"])]
    assert caps, "nvidia-smi listed no GPU"
    wrong = [c for c in caps if c != want]
    assert not wrong, (
        f"compute capability {', '.join(caps)}, the {plan.hw_profile} profile expects {want} "
        "(cluster_hw.compute_capability): another GPU than the profile's, or a driver too old "
        "to know it (GB10: 12.1 from driver 580); check hw_profile, or update the driver"
    )
    seen(f"compute capability {caps[0]}")


def test_nvcc(host: Any, plan: Plan, nplan: NodePlan, seen: Any) -> None:
    """nvcc is there and is the CUDA release the driver's packages are held at."""
    if not plan.cluster_hw.get("cuda_toolkit"):
        pytest.skip(
            f"no CUDA toolkit on the {plan.hw_profile} profile "
            "(cluster_hw.cuda_toolkit is not true)"
        )
    want = nplan.nvidia_driver
    out = _run(host, [want.nvcc, "--version"])
    toolkit = f"cuda-toolkit-{want.cuda_release.replace('.', '-')}"
    assert out.rc not in (126, 127), (
        f"no nvcc at {want.nvcc} (nvidia_driver_nvcc): install {toolkit} (DGX OS puts it "
        "under /usr/local/cuda, not on PATH)"
    )
    assert out.rc == 0, f"{want.nvcc} --version: rc {out.rc}: {out.stderr.strip()[:200]}"
    have = tool_output.nvcc_version(out.stdout)
    assert have["release"] == want.cuda_release, (
        f"{want.nvcc} is CUDA {have['release']} (V{have['version']}), want CUDA "
        f"{want.cuda_release} (nvidia_driver_cuda_package_version): install {toolkit}, or set "
        "nvidia_driver_nvcc to its nvcc"
    )
    assert tool_output.at_least(have["version"], want.min_nvcc), (
        f"{want.nvcc} is V{have['version']}, older than nvidia_driver_min_nvcc {want.min_nvcc}"
    )
    seen(f"{want.nvcc}: CUDA {have['release']}, V{have['version']}")


_DPKG_QUERY = [
    "dpkg-query",
    "-W",
    "-f",
    "${Package}\t${Version}\t${Architecture}\t${db:Status-Abbrev}\n",
]


def _packages(host: Any) -> dict[str, list[dict[str, str]]]:
    """The node's installed packages with their dpkg selection (hold or install)."""
    out = _run(host, _DPKG_QUERY)
    assert out.rc == 0, f"dpkg-query: rc {out.rc}: {out.stderr.strip()[:200]}"
    return tool_output.dpkg_query(out.stdout)


def _boot_kernel(host: Any) -> tuple[str | None, str]:
    """The kernel the node boots next, kept simple: what /boot/vmlinuz points at (the
    default kernel linux-base keeps there, linux-update-symlinks(8); GRUB's default entry
    boots the same one unless GRUB_DEFAULT was changed), else the newest /boot/vmlinuz-*.
    provision's verify (roles/nvidia_driver, nvidia_kernel_modules) reads GRUB itself."""
    link = host.run("readlink /boot/vmlinuz")
    target = link.stdout.strip().rsplit("/", 1)[-1]
    if link.rc == 0 and target.startswith("vmlinuz-"):
        return target.removeprefix("vmlinuz-"), f"/boot/vmlinuz -> {target}"
    listing = host.run("ls -1 /boot")
    kernels = [
        n.removeprefix("vmlinuz-")
        for n in listing.stdout.split()
        if n.startswith("vmlinuz-") and not n.endswith((".old", ".efi.signed"))
    ]
    if not kernels:
        return None, "no /boot/vmlinuz and no /boot/vmlinuz-*"
    newest = max(kernels, key=tool_output.version_tuple)
    return newest, f"the newest of /boot/vmlinuz-* ({len(kernels)})"


def test_kernel_module(host: Any, plan: Plan, nplan: NodePlan, seen: Any) -> None:
    """The running kernel and the one booted next both have an nvidia module of the
    installed driver's version (linux-modules-nvidia-580-open-<kernel> on DGX OS)."""
    if not plan.cluster_hw.get("own_kernel"):
        pytest.skip(
            f"the {plan.hw_profile} profile boots no kernel of its own (cluster_hw.own_kernel "
            "is not true)"
        )
    want = nplan.nvidia_driver
    installed = _packages(host).get(want.driver_package)
    assert installed, f"{want.driver_package} is not installed: no driver says which nvidia module"
    driver = tool_output.debian_upstream_version(installed[0]["version"]) or "?"
    running = tool_output.uname_release(_run(host, ["uname", "-r"]).stdout)
    boot, how = _boot_kernel(host)
    assert boot is not None, f"cannot tell which kernel boots next: {how}"
    seen_parts = []
    for role, kernel in (("running kernel", running), (f"next-boot kernel ({how})", boot)):
        if role != "running kernel" and kernel == running:
            continue
        out = _run(host, ["modinfo", "-k", kernel, "nvidia"])
        module = tool_output.modinfo(out.stdout) if out.rc == 0 else {}
        package = f"{want.modules_prefix}{kernel}"
        assert module.get("filename"), (
            f"the {role} {kernel} has no nvidia module "
            f"({' '.join((out.stderr or out.stdout).split())[:120] or f'rc {out.rc}'}): "
            f"it boots without a GPU. Install {package} (the one built for driver {driver}); if "
            "apt wants another driver for it, move kernel and driver together "
            "(docs/operate.md, rolling update)"
        )
        assert module.get("version") == driver, (
            f"the {role} {kernel} has nvidia {module.get('version', '?')}, driver {driver} is "
            f"installed ({want.driver_package}): install {package} of driver {driver}, or move "
            "kernel and driver together (docs/operate.md, rolling update)"
        )
        seen_parts.append(f"{kernel} nvidia {driver}")
    seen("; ".join(seen_parts) + (" (running and next boot)" if boot == running else ""))


def test_holds(host: Any, plan: Plan, nplan: NodePlan, seen: Any) -> None:
    """What is held is the driver set, all of it, the running kernel's packages with it, and
    nothing else. Held packages with updates waiting are reported (security first), not
    failed: they wait for a rolling update."""
    want = nplan.nvidia_driver
    packages = _packages(host)
    # The patterns are package names with * and ? only (roles/nvidia_driver's
    # nvidia_hold_pattern_problems refuses anything else), where fnmatch's glob is the
    # role's own translation (nvidia_hold_regex): tests/unit/test_validate_holds.py.
    in_set = {n for n in packages if any(fnmatch.fnmatchcase(n, p) for p in want.hold)}
    held = {n for n, v in packages.items() if any(e["selection"] == "hold" for e in v)}
    outside = sorted(held - in_set)
    assert not outside, (
        f"held outside the driver set: {', '.join(outside)}; they get no updates (the NVIDIA "
        f"Container Toolkit and cuda-keyring must): `sudo apt-mark unhold {' '.join(outside)}` "
        f"(the set: {want.hold_list})"
    )
    loose = sorted(in_set - held)
    assert not loose, (
        f"not on hold: {', '.join(loose)}; an upgrade can move them apart from the driver: "
        "run `sparkctl provision` (--tags nvidia_driver_configure)"
    )
    if plan.cluster_hw.get("own_kernel"):
        running = tool_output.uname_release(_run(host, ["uname", "-r"]).stdout)
        modules = f"{want.modules_prefix}{running}"
        meta = f"linux-image-{want.kernel_flavour}"
        missing = [p for p in (modules, meta) if p not in packages]
        assert not missing, (
            f"the running kernel {running}'s {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed, so no hold keeps kernel "
            "and driver together; install it, then run `sparkctl provision`"
        )
    said = f"{len(held)} held, the driver set and nothing else"
    if not held:
        said = "no package of the driver set installed, nothing held"
    out = _run(host, ["env", "LC_ALL=C", "apt", "list", "--upgradable"])
    if out.rc != 0:
        seen(f"{said}; apt list --upgradable: rc {out.rc} (updates not read)")
        return
    waiting = [u for u in tool_output.apt_upgradable(out.stdout) if u["name"] in held]
    if waiting:
        shown = ", ".join(
            f"{u['name']} {u['installed']} -> {u['version']} ({','.join(u['pockets'])})"
            for u in waiting[:6]
        )
        more = f" and {len(waiting) - 6} more" if len(waiting) > 6 else ""
        security = sum(1 for u in waiting if u["security"])
        said += (
            f"; WARNING: {len(waiting)} held with updates waiting ({security} from a security "
            f"pocket, listed first): {shown}{more}; update node by node (docs/operate.md)"
        )
    seen(said)


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


def test_twin_pcie(host: Any, nplan: NodePlan, twin: str, seen: Any) -> None:
    """The twin's PCIe link trained at its maximum speed and width. The netdev's own speed
    reads 200000 Mb/s whatever the PCIe link is, so a controller trained at x2 instead of x4
    halves that twin's bandwidth unseen by twin_speed."""
    netdev = _twin(nplan, twin).netdev
    base = f"/sys/class/net/{shlex.quote(netdev)}"
    where = host.run(f"readlink -f {base}").stdout.strip()
    if "/devices/virtual/" in where:
        pytest.skip(f"{netdev} is a virtual netdev ({where}): no PCIe link to train")
    names = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width")
    out = host.run("cat " + " ".join(f"{base}/device/{n}" for n in names))
    lines = out.stdout.splitlines()
    assert out.rc == 0 and len(lines) == len(names), (
        f"{netdev}: cannot read its PCIe link from sysfs "
        f"({out.stderr.strip()[:160] or 'no output'})"
    )
    speed, max_speed = (tool_output.pcie_link_speed(t) for t in lines[:2])
    width, max_width = (tool_output.pcie_link_width(t) for t in lines[2:])
    assert speed is not None, f"{netdev}: its PCIe link is not trained (speed Unknown)"
    have = f"{speed:g} GT/s x{width}"
    top = f"{max_speed:g} GT/s x{max_width}" if max_speed is not None else f"? x{max_width}"
    assert (max_speed is None or speed >= max_speed) and width >= max_width, (
        f"{netdev} PCIe link {have}, below its {top}: this twin gets "
        f"{speed * width / ((max_speed or speed) * max_width):.0%} of its PCIe bandwidth while "
        "ethtool still reads full speed; update the UEFI/BIOS and firmware "
        "(`sudo fwupdmgr refresh && sudo fwupdmgr upgrade`, then reboot) and check again"
    )
    seen(f"{netdev} PCIe {have} (its maximum)")


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


def _memory_cgroup(host: Any, pid: str) -> dict[str, Any] | None:
    """The memory cgroup of process ``pid`` (``self``: this check's own ssh session, where
    nccl-tests' ranks also start) as :func:`tool_output.memory_cgroup` reads it; None
    where no memory controller is mounted."""
    place = tool_output.memory_cgroup_dirs(
        host.file(f"/proc/{pid}/cgroup").content_string,
        host.file("/proc/self/mountinfo").content_string,
    )
    if place is None:
        return None
    files = tool_output.memory_cgroup_files(place)
    out = host.run("grep -H -s . " + " ".join(shlex.quote(f) for f in files))
    return tool_output.memory_cgroup(place, out.stdout)


def _server_pid(host: Any, nplan: NodePlan) -> str | None:
    """The running server's process: the container's (its cgroup is the engine's, not the
    unit's: the unit's MainPID is the docker client) or the venv unit's main process."""
    s = nplan.sglang
    if s.install_method == "container":
        with as_root(host):
            out = host.run(
                shlex.join([s.engine, "inspect", "--format", "{{.State.Pid}}", s.container_name])
            )
    else:
        out = host.run(f"systemctl show -p MainPID --value {shlex.quote(s.unit)}")
    pid = out.stdout.strip() if out.rc == 0 else ""
    return pid if pid.isdigit() and pid != "0" else None


def test_memory(
    host: Any, nplan: NodePlan, settings: ValidatePlan, facts: dict[str, Any], seen: Any
) -> None:
    """Room for this node's share of the weights plus headroom (SGLang's own use counts as room).

    What is available is MemAvailable, or less where a cgroup limit of this session
    leaves less (a node that is a container); it is also what sizes nccl-tests' sweep
    (``mem_available``). The server's use is read from its own memory cgroup: with the
    docker engine the container's (docker's cgroup), not the unit's, which holds only
    the docker client (systemd.resource-control(5) accounts a unit's own cgroup)."""
    mem = tool_output.meminfo(host.file("/proc/meminfo").content_string)
    available, where = mem["MemAvailable"], "MemAvailable"
    own = _memory_cgroup(host, "self")
    if own is not None and own["headroom"] is not None and own["headroom"] < available:
        available = int(own["headroom"])
        where = f"cgroup {own['bound']}: limit {own['limit'] / GiB:.1f} GiB less its use"
    facts["mem_available"] = available
    facts["mem_available_from"] = where
    room, server = available, ""
    pid = _server_pid(host, nplan)  # None: no server runs (a container that ran has Pid 0)
    if pid is not None:
        cg = _memory_cgroup(host, pid)
        if cg is not None and cg["usage"] is not None:
            room += int(cg["usage"])
            server = f" + {cg['usage'] / GiB:.1f} GiB the running server's cgroup holds"
    share = 0
    if nplan.model_cache.source != "none":
        model = _model_check(host, nplan, facts)
        share = int(model["total_bytes"]) // max(1, nplan.sglang.nnodes)
    need = share + settings.mem_headroom_mb * MiB
    assert room >= need, (
        f"{available / GiB:.1f} GiB available ({where}){server}, need {need / GiB:.1f} GiB "
        f"({share / GiB:.1f} GiB of weights + "
        f"{settings.mem_headroom_mb} MiB headroom)"
    )
    seen(f"{available / GiB:.1f} GiB available ({where}){server} >= {need / GiB:.1f} GiB")


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
