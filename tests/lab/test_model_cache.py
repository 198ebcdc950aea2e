"""`sparkctl model sync` end to end on the lab: the chain over the fabric, repair, refusal, secrets.

A synthetic model (`sparkctl lab model`) on the head is the source; the role
streams it along spark2 -> spark3 -> spark4, two streams over fabric_a and fabric_b. Every assertion
reads the nodes themselves (sha256sum, stat, interface counters).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import SIM_INVENTORY, LabSession, assert_unchanged, sparkctl
from tests.labhost import corrupt_in_place, ssh

pytestmark = pytest.mark.lab

MODEL_DIR = "/srv/sparkctl-model/synthetic"
CACHE = "/var/lib/sparkctl/models"
COPY = f"{CACHE}/synthetic"
SIZE_MIB = 96
SOURCE = ["-e", "model_cache_source=head", "-e", f"model_cache_head_dir={MODEL_DIR}"]


def _sync(
    *args: str,
    inventory: Path = SIM_INVENTORY,
    env: dict[str, str] | None = None,
    timeout: float = 1800,
) -> tuple[int, dict[str, object], str]:
    proc = sparkctl(
        "model", "sync", str(inventory), "--json", *SOURCE, *args, timeout=timeout, env=env
    )
    try:
        result = dict(json.loads(proc.stdout))
    except ValueError:
        result = {}
    return proc.returncode, result, proc.stdout + proc.stderr


def _sums(ip: str, root: str) -> dict[str, str]:
    """relative path -> sha256 of every file under root on a node."""
    out = ssh(
        ip, f"cd {root} && find . -type f ! -name '*.sparkctl-partial' -print0 | xargs -0 sha256sum"
    ).stdout
    sums = {}
    for line in out.splitlines():
        digest, path = line.split(maxsplit=1)
        sums[path.removeprefix("./")] = digest
    return sums


def _mtimes(ip: str, root: str) -> dict[str, str]:
    out = ssh(ip, f"cd {root} && find . -type f -printf '%P %T@\\n'").stdout
    return dict(line.split() for line in out.splitlines())


def _rx_bytes(ip: str, netdev: str) -> int:
    return int(ssh(ip, f"cat /sys/class/net/{netdev}/statistics/rx_bytes").stdout)


def _netdev_with(ip: str, address: str) -> str:
    """The interface that carries ``address`` on the node at ``ip``."""
    for entry in json.loads(ssh(ip, "ip -j -4 addr show").stdout):
        if any(a.get("local") == address for a in entry.get("addr_info", [])):
            return str(entry["ifname"])
    raise AssertionError(f"{ip}: no interface carries {address}")


@pytest.fixture(scope="module")
def model(lab: LabSession, provisioned: dict[str, object]) -> Iterator[dict[str, object]]:
    made = sparkctl(
        "lab",
        "model",
        "--size",
        f"{SIZE_MIB}MiB",
        "--files",
        "4",
        "--dir",
        MODEL_DIR,
        "--json",
        check=True,
    )
    yield dict(json.loads(made.stdout))
    for node in lab.inventory.nodes:  # leave the lab as the other modules expect it
        ssh(
            node.mgmt_ip,
            f"rm -rf {CACHE} /srv/sparkctl-model /dev/shm/sparkctl-models",
            check=False,
        )


@pytest.fixture(scope="module")
def first_sync(lab: LabSession, model: dict[str, object]) -> dict[str, object]:
    spark3 = lab.inventory.node("spark3").mgmt_ip
    devs = ("enp1s0f1np1", "enP2p1s0f1np1", _netdev_with(spark3, spark3))  # twin a, b, mgmt
    before = [_rx_bytes(spark3, dev) for dev in devs]
    rc, result, output = _sync()
    assert rc == 0, output[-5000:]
    after = [_rx_bytes(spark3, dev) for dev in devs]
    rx = [a - b for a, b in zip(after, before, strict=True)]
    return {"result": result, "twin_a_rx": rx[0], "twin_b_rx": rx[1], "mgmt_rx": rx[2]}


def test_sync_puts_identical_copies_on_every_node(
    lab: LabSession, first_sync: dict[str, object]
) -> None:
    head = lab.inventory.node("spark1").mgmt_ip
    want = _sums(head, MODEL_DIR)
    assert len(want) == 6  # config.json, the safetensors index and four shards
    for node in lab.inventory.nodes[1:]:
        assert _sums(node.mgmt_ip, COPY) == want, node.name
        assert ssh(node.mgmt_ip, f"readlink {CACHE}/current").stdout.strip() == COPY
        manifest = json.loads(
            ssh(node.mgmt_ip, f"cat {CACHE}/.sparkctl/synthetic.manifest.json").stdout
        )
        assert {f["path"]: f["sha256"] for f in manifest["files"]} == want
    assert ssh(head, f"readlink {CACHE}/current").stdout.strip() == MODEL_DIR


def test_the_model_crosses_the_fabric_not_the_management_network(
    first_sync: dict[str, object],
) -> None:
    """Over both twins: the lab's two cores make model_cache_streams auto two streams,
    dealt over fabric_a and fabric_b (each carries a share, together the model)."""
    size = SIZE_MIB << 20
    a, b = int(str(first_sync["twin_a_rx"])), int(str(first_sync["twin_b_rx"]))
    assert a + b >= size  # spark3 received the model on the fabric
    assert a >= size // 4 and b >= size // 4  # each twin carried a share of it
    assert int(str(first_sync["mgmt_rx"])) < size // 4


def test_a_second_sync_transfers_nothing(lab: LabSession, first_sync: dict[str, object]) -> None:
    spark4 = lab.inventory.node("spark4").mgmt_ip
    mtimes = _mtimes(spark4, COPY)
    before = _rx_bytes(spark4, "enp1s0f1np1")
    rc, result, output = _sync()
    assert rc == 0, output[-5000:]
    hosts = result["hosts"]
    assert isinstance(hosts, dict)
    assert {h: s["changed"] for h, s in hosts.items()} == dict.fromkeys(hosts, 0)
    assert _rx_bytes(spark4, "enp1s0f1np1") - before < 1 << 20
    assert _mtimes(spark4, COPY) == mtimes


def test_a_corrupt_and_a_truncated_file_are_repaired_and_nothing_else(
    lab: LabSession, first_sync: dict[str, object]
) -> None:
    spark2, spark3, spark4 = (lab.inventory.node(n).mgmt_ip for n in ("spark2", "spark3", "spark4"))
    shard2 = "model-00002-of-00004.safetensors"
    shard3 = "model-00003-of-00004.safetensors"
    ssh(spark3, f"printf 'X' | dd of={COPY}/{shard2} bs=1 seek=4096 conv=notrunc status=none")
    ssh(spark2, f"truncate -s 1000 {COPY}/{shard3}")
    before = {ip: _mtimes(ip, COPY) for ip in (spark2, spark3, spark4)}
    rc, _, output = _sync()
    assert rc == 0, output[-5000:]
    want = _sums(lab.inventory.node("spark1").mgmt_ip, MODEL_DIR)
    after = {ip: _mtimes(ip, COPY) for ip in (spark2, spark3, spark4)}
    for ip in (spark2, spark3, spark4):
        assert _sums(ip, COPY) == want
    changed = {ip: sorted(p for p in after[ip] if after[ip][p] != before[ip][p]) for ip in after}
    assert changed == {spark2: [shard3], spark3: [shard2], spark4: []}


@pytest.mark.fault
def test_a_truncated_file_is_found_by_validate_and_repaired_by_model_sync(
    lab: LabSession, first_sync: dict[str, object], snapshot: Callable[[], dict[str, object]]
) -> None:
    spark2 = lab.inventory.node("spark2").mgmt_ip
    shard = "model-00004-of-00004.safetensors"
    ssh(spark2, f"truncate -s 4096 {COPY}/{shard}")
    faulted = snapshot()
    proc = sparkctl("validate", str(SIM_INVENTORY), "--no-nccl", "--json", *SOURCE, timeout=900)
    assert_unchanged(faulted, snapshot(), "validate")
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    bad = [c for c in report["checks"] if c["outcome"] in ("failed", "error")]
    assert [(c["check"], c["host"]) for c in bad] == [("model_cache", "spark2")], bad
    assert "1 damaged" in bad[0]["message"] and shard in bad[0]["message"], bad[0]
    assert "spark2" in proc.stderr and "model_cache" in proc.stderr
    rc, _, output = _sync()
    assert rc == 0, output[-5000:]
    assert _sums(spark2, COPY) == _sums(lab.inventory.node("spark1").mgmt_ip, MODEL_DIR)
    again = sparkctl("validate", str(SIM_INVENTORY), "--no-nccl", "--json", *SOURCE, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]


def test_corruption_that_keeps_size_and_mtime_needs_full_verify(
    lab: LabSession, first_sync: dict[str, object]
) -> None:
    spark4 = lab.inventory.node("spark4").mgmt_ip
    shard = f"{COPY}/model-00001-of-00004.safetensors"
    corrupt_in_place(spark4, shard, 10, "Y")
    want = _sums(lab.inventory.node("spark1").mgmt_ip, MODEL_DIR)
    rc, _, output = _sync()
    assert rc == 0, output[-5000:]
    assert _sums(spark4, COPY) != want  # the quick check trusts size and mtime, as documented
    rc, _, output = _sync("--full-verify")
    assert rc == 0, output[-5000:]
    assert _sums(spark4, COPY) == want


def test_a_controller_directory_reaches_every_node_through_the_head(
    lab: LabSession, first_sync: dict[str, object], tmp_path: Path
) -> None:
    source = tmp_path / "ctl-model"
    (source / "sub").mkdir(parents=True)
    blobs = {
        "config.json": b'{"model_type": "controller"}',
        "weights.bin": os.urandom(3 << 20),
        "sub/tokenizer.bin": os.urandom(4099),
    }
    for rel, data in blobs.items():
        (source / rel).write_bytes(data)
    rc, _, output = _sync(
        "-e", "model_cache_source=controller", "-e", f"model_cache_controller_dir={source}"
    )
    assert rc == 0, output[-5000:]
    want = {rel: hashlib.sha256(data).hexdigest() for rel, data in blobs.items()}
    for node in lab.inventory.nodes:  # the head is the first hop and keeps a copy
        assert _sums(node.mgmt_ip, f"{CACHE}/ctl-model") == want, node.name
        assert ssh(node.mgmt_ip, f"readlink {CACHE}/current").stdout.strip() == f"{CACHE}/ctl-model"
    rc, _, output = _sync()  # back to the head's model for the tests after this one
    assert rc == 0, output[-5000:]


def test_a_node_without_room_is_refused_before_anything_is_copied(
    lab: LabSession, first_sync: dict[str, object], tmp_path: Path
) -> None:
    # spark4's cache on its /dev/shm (a 64 MB tmpfs in the lab) cannot hold the model.
    spark4 = lab.inventory.node("spark4").mgmt_ip
    free = int(ssh(spark4, "df --output=avail -B1 /dev/shm | tail -1").stdout)
    assert free < SIZE_MIB << 20
    inventory = tmp_path / "inventory"
    shutil.copytree(SIM_INVENTORY.parent, inventory)
    (inventory / "host_vars").mkdir(exist_ok=True)
    (inventory / "host_vars" / "spark4.yml").write_text(
        "model_cache_dir: /dev/shm/sparkctl-models\n"
    )
    rc, _, output = _sync(inventory=inventory / "sim.ini")
    assert rc != 0
    assert "spark4: the model needs" in output and "GiB are free; nothing was copied" in output
    listing = ssh(spark4, "ls -A /dev/shm/sparkctl-models/synthetic 2>/dev/null || true").stdout
    assert "safetensors" not in listing


HUB = "/var/lib/sparkctl-lab/hub"
HUB_PORT = 8080
HUB_UNIT = "sparkctl-lab-hub"
HF_REPO = "sparkctl-lab/sentinel"


@pytest.fixture
def lab_hub(lab: LabSession) -> Iterator[tuple[str, str, str]]:
    """The lab's Hugging Face Hub (lab/sparkctl_lab/standins/hfhub.py) on lab-switch, where
    huggingface.co is for a Spark: one repository of 3 MiB, a token required, bodies served
    at 256 KiB/s so that a download lasts long enough to be watched. Yields (endpoint,
    commit, token); removes the Hub and its files afterwards."""
    assert lab.inventory.switch is not None
    switch = lab.inventory.switch.mgmt_ip
    token = "hf_sparkctlSentinel" + "7" * 20
    script = (
        Path(__file__).resolve().parents[2] / "lab" / "sparkctl_lab" / "standins" / "hfhub.py"
    ).read_text()
    ssh(switch, f"mkdir -p {HUB}/src && cat > {HUB}/hfhub.py <<'PYEOF'\n{script}PYEOF\n")
    ssh(
        switch,
        f"cd {HUB}/src && head -c 3145728 /dev/urandom > model.safetensors && "
        'echo \'{"model_type": "sparkctl-synthetic"}\' > config.json && '
        f"umask 077 && printf %s {token} > {HUB}/token",
    )
    made = json.loads(
        ssh(
            switch,
            f"python3 {HUB}/hfhub.py make-repo {HUB}/src --root {HUB}/repos --repo {HF_REPO}",
        ).stdout.splitlines()[-1]
    )
    ssh(
        switch,
        f"systemd-run --unit={HUB_UNIT} python3 {HUB}/hfhub.py --root {HUB}/repos "
        f"--bind {switch} --port {HUB_PORT} --token-file {HUB}/token --rate 262144",
    )
    ssh(
        switch,
        f"for i in $(seq 50); do ss -Hltn 'sport = :{HUB_PORT}' | grep -q . && exit 0; "
        "sleep 0.1; done; exit 1",
    )
    try:
        yield f"http://{switch}:{HUB_PORT}", str(made["commit"]), token
    finally:
        ssh(switch, f"systemctl stop {HUB_UNIT}; rm -rf {HUB}", check=False)
        for node in lab.inventory.nodes:
            ssh(node.mgmt_ip, f"rm -rf {CACHE}/hub {CACHE}/.sparkctl/*sentinel*", check=False)


def test_the_hugging_face_token_never_reaches_a_command_line_output_or_artifacts(
    lab: LabSession, first_sync: dict[str, object], lab_hub: tuple[str, str, str]
) -> None:
    """A real download (huggingface_hub's snapshot_download on the head, from the lab Hub):
    while it runs, no process on the head has the token in its command line (world-readable
    in /proc) - Ansible's environment: would put it there; and afterwards it is in no output,
    artifact or fact."""
    endpoint, commit, token = lab_hub
    head = lab.inventory.node("spark1").mgmt_ip
    pattern = base64.b64encode(token.encode()).decode()
    ssh(head, f"echo {pattern} | base64 -d > /run/sparkctl-pattern")
    env = {**os.environ, "HF_TOKEN": token}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sparkctl",
            "model",
            "sync",
            str(SIM_INVENTORY),
            "--json",
            "-e",
            "model_cache_source=hf",
            "-e",
            f"model_cache_hf_repo={HF_REPO}",
            "-e",
            f"model_cache_hf_revision={commit}",
            "-e",
            f"model_cache_hf_endpoint={endpoint}",
            # The lab's Hub answers plain http inside the lab: with a token set that is a
            # risk an inventory must accept by name (sparkctl/rules/risks.py).
            "-e",
            "preflight_accepted_risks=[plain_http]",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    samples = during = 0
    holders: set[str] = set()
    try:
        while proc.poll() is None:
            out = ssh(
                head,
                "grep -lF -f /run/sparkctl-pattern /proc/[0-9]*/cmdline 2>/dev/null; "
                "echo @@; grep -l fetch-hf /proc/[0-9]*/cmdline 2>/dev/null; true",
                timeout=30,
            ).stdout
            found, fetching = out.split("@@")
            holders |= set(found.split())
            samples += 1
            during += bool(fetching.split())
            time.sleep(0.3)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        ssh(head, "rm -f /run/sparkctl-pattern", check=False)
    assert proc.returncode == 0, stdout[-2000:] + stderr[-4000:]
    assert during >= 3, f"only {during} of {samples} samples saw the download running"
    assert holders == set(), holders
    # the snapshot is on every node, byte for byte the Hub's
    snapshot = f"{CACHE}/hub/models--{HF_REPO.replace('/', '--')}/snapshots/{commit}"
    # the hub cache's snapshot holds links into its blobs: hash what they point to
    sums = {
        n.name: {
            file: digest
            for digest, file in (
                line.split(maxsplit=1)
                for line in ssh(n.mgmt_ip, f"cd {snapshot} && sha256sum -- *").stdout.splitlines()
            )
        }
        for n in lab.inventory.nodes
    }
    assert set(sums["spark1"]) == {"config.json", "model.safetensors"}
    assert all(s == sums["spark1"] for s in sums.values()), sums
    assert token not in stdout + stderr
    state = Path(os.environ.get("SPARKCTL_STATE_DIR", Path.home() / ".local/state/sparkctl"))
    runs = sorted((state / "results" / "sim").glob("*-model-sync*"))
    assert runs
    for path in runs[-1].rglob("*"):
        if path.is_file():
            assert token not in path.read_text(errors="replace"), path
    for path in (state / "facts").rglob("*"):
        if path.is_file():
            assert token not in path.read_text(errors="replace"), path


# ------------------------------------------------ failing fast, and saying where
# A sync that cannot finish fails within its bounds, names the hop, and leaves no
# part of the chain running on any node. One fault per test, several assertions.
TWINS = {"a": "enp1s0f1np1", "b": "enP2p1s0f1np1"}
# inventory/group_vars/sim/cluster.yml: the switch port of each node's twin
PORT = {("spark2", "a"): "swp3", ("spark3", "a"): "swp5"}
# The chain's processes: a relay that sends or receives, an ssh with the relay key
# (the brackets keep pgrep's own shell out of its answer).
CHAIN_PROCESSES = "pgrep -af '[s]parkctl-model-relay (send|recv|serve)|[i]d_sparkctl_relay'"
BOARD = f"{CACHE}/.sparkctl/progress.json"
SPARKCTL_SYNC = [sys.executable, "-m", "sparkctl", "model", "sync", str(SIM_INVENTORY), "--json"]
# The Ctrl-C test's lease (model_cache_lease_timeout) and the rate of the port that
# keeps its transfer going beyond it.
LEASE_S = 15
LEASE_RATE_MBIT = 8


def _chain_left(lab: LabSession, bound: float = 180) -> dict[str, str]:
    """node -> its chain processes still running once they had ``bound`` seconds to
    end (empty as soon as there are none on any node)."""
    end = time.monotonic() + bound
    while True:
        left = {
            n.name: out
            for n in lab.inventory.nodes
            if (out := ssh(n.mgmt_ip, CHAIN_PROCESSES, check=False).stdout.strip())
        }
        if not left or time.monotonic() > end:
            return left
        time.sleep(2)


def _board(lab: LabSession) -> dict[str, object]:
    head = lab.inventory.node("spark1").mgmt_ip
    text = ssh(head, f"cat {BOARD} 2>/dev/null || echo '{{}}'", check=False).stdout
    try:
        return dict(json.loads(text))
    except ValueError:
        return {}


def _drop_copies(lab: LabSession, *names: str) -> None:
    for name in names:
        ssh(lab.inventory.node(name).mgmt_ip, f"rm -rf {COPY}")


def _sync_running(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], Callable[[], str]]:
    """`model sync` in its own session (as a terminal runs it), output in files."""
    out, err = tmp_path / "sync.out", tmp_path / "sync.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [*SPARKCTL_SYNC, *SOURCE, *args],
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
    return proc, lambda: out.read_text(errors="replace") + err.read_text(errors="replace")


def _wait_moving(lab: LabSession, proc: subprocess.Popen[bytes], node: str) -> None:
    """Until the board of a new job shows ``node`` receiving and the job unfinished."""
    before = _board(lab).get("job")
    end = time.monotonic() + 600
    while time.monotonic() < end and proc.poll() is None:
        board = _board(lab)
        hosts = board.get("hosts") or {}
        assert isinstance(hosts, dict)
        if (
            board.get("job") != before
            and not board.get("finished")
            and int((hosts.get(node) or {}).get("bytes", 0)) > 0
        ):
            return
        time.sleep(0.5)
    raise AssertionError(f"the transfer never reached {node} (sync rc {proc.poll()})")


def _wait_address(ip: str, netdev: str, address: str, bound: float = 120) -> None:
    end = time.monotonic() + bound
    while address not in ssh(ip, f"ip -4 -o addr show dev {netdev}", check=False).stdout:
        if time.monotonic() > end:
            raise AssertionError(f"{netdev} on {ip} did not get {address} back")
        time.sleep(1)


@pytest.fixture
def slow_port(lab: LabSession) -> Iterator[Callable[..., None]]:
    """Change switch ports (slower, or the cable pulled); undone afterwards, the
    addresses awaited."""
    changed: list[tuple[str, str]] = []

    def change(node: str, twin: str, *args: str) -> None:
        sparkctl("lab", "port", PORT[(node, twin)], *args, check=True)
        changed.append((node, twin))

    yield change
    rate = str(lab.inventory.cluster_var("lab_link_rate_mbit", 1000))
    for node, twin in changed:
        sparkctl("lab", "port", PORT[(node, twin)], "--up", "--rate", rate, check=True)
        n = lab.inventory.node(node)
        _wait_address(n.mgmt_ip, TWINS[twin], n.fabric_ips[twin])


def test_a_hop_without_fabric_addresses_is_named_before_anything_is_sent(
    lab: LabSession, first_sync: dict[str, object]
) -> None:
    """The rehearsal lab's case: up, but spark3 without its fabric addresses (as before
    roce_fabric ran). The fabric check stops the run, naming hop, addresses and
    twins, and the node that tried them; no byte is sent; with the addresses back,
    the same sync completes."""
    spark3 = lab.inventory.node("spark3")
    _drop_copies(lab, "spark3")
    before = _board(lab).get("job")
    ssh(spark3.mgmt_ip, f"ip addr flush dev {TWINS['a']} && ip addr flush dev {TWINS['b']}")
    try:
        # No timed assertion: each address is given 3 s, all at once; the run's own
        # timeout only guards against the hang this replaces.
        rc, _, output = _sync(timeout=600)
    finally:
        ssh(spark3.mgmt_ip, f"networkctl reconfigure {TWINS['a']} {TWINS['b']}", check=False)
        for twin, netdev in TWINS.items():
            _wait_address(spark3.mgmt_ip, netdev, spark3.fabric_ips[twin])
    assert rc != 0, output[-3000:]
    for twin in ("a", "b"):
        assert (
            f"spark3: fabric_{twin}_ip {spark3.fabric_ips[twin]} does not answer from spark1"
        ) in output, output[-3000:]
    assert "nothing was sent" in output and "roce_fabric" in output
    assert _board(lab).get("job") == before  # no sender ran
    assert ssh(spark3.mgmt_ip, f"ls -A {COPY} 2>/dev/null | wc -l").stdout.strip() == "0"
    rc, _, output = _sync()
    assert rc == 0, output[-3000:]
    head = lab.inventory.node("spark1").mgmt_ip
    assert _sums(spark3.mgmt_ip, COPY) == _sums(head, MODEL_DIR)


def test_a_cable_pulled_mid_transfer_fails_naming_the_hop_and_ends_the_chain(
    lab: LabSession, first_sync: dict[str, object], slow_port: Callable[..., None], tmp_path: Path
) -> None:
    """spark3's twin a is slowed so that the transfer is still moving when its cable is
    pulled. The sync fails within the stall bound (10 s here; ssh's own keepalive
    ends the dead connection after 15 s), naming spark3 and the address on that
    twin; nothing of the chain is left on any node, even with the cable still out,
    and once it is back the next sync sends what is missing."""
    spark3 = lab.inventory.node("spark3")
    _drop_copies(lab, "spark3", "spark4")
    slow_port("spark3", "a", "--rate", "16")  # 2 MB/s: the 48 MiB on twin a take ~25 s
    proc, output = _sync_running(tmp_path, "-e", "model_cache_stall_timeout=10")
    try:
        _wait_moving(lab, proc, "spark3")
        slow_port("spark3", "a", "--down")
        rc = proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    said = output()
    assert rc != 0, said[-3000:]
    assert "spark3" in said and spark3.fabric_ips["a"] in said, said[-3000:]
    board = _board(lab)
    assert board.get("finished") is True and "spark3" in str(board.get("error")), board
    stalled = board.get("stalled") or []
    assert isinstance(stalled, list)
    if stalled:  # the sender's stall bound came first (ssh's keepalive otherwise)
        # The pulled cable is spark3's twin a: the link into spark3 (from spark1) and
        # the one out of it (to spark4) both run through it; the one named has it at
        # one end, by node and address.
        (where,) = [s for s in stalled if s["twin"] == "fabric_a_ip"]
        ends = {(where["host"], where["address"]), (where["from"], where.get("from_address"))}
        assert ("spark3", spark3.fabric_ips["a"]) in ends, where
        assert where["twin"] == "fabric_a_ip", where
    # The cable still out: beyond it, spark3's sshd keeps the dead connection (no
    # keepalive of its own), but its relay ends itself once nothing came for its idle
    # bound (2 x 10 s + 30 s, from the sender), and its next hop with it.
    assert _chain_left(lab) == {}
    slow_port(
        "spark3", "a", "--up", "--rate", str(lab.inventory.cluster_var("lab_link_rate_mbit", 1000))
    )
    _wait_address(spark3.mgmt_ip, TWINS["a"], spark3.fabric_ips["a"])
    rc, _, again = _sync()
    assert rc == 0, again[-3000:]
    head = lab.inventory.node("spark1").mgmt_ip
    for name in ("spark3", "spark4"):
        assert _sums(lab.inventory.node(name).mgmt_ip, COPY) == _sums(head, MODEL_DIR), name


def test_ctrl_c_leaves_no_relay_or_ssh_of_the_chain_on_any_node(
    lab: LabSession, first_sync: dict[str, object], slow_port: Callable[..., None], tmp_path: Path
) -> None:
    """Ctrl-C (SIGINT to the terminal's process group) while the model moves: the
    runner kills ansible-playbook, the sender on the head stops once nobody reads its
    progress (its lease), and every hop ends its next one. Nothing of the chain is
    left on any node, and the board says why the sender stopped."""
    _drop_copies(lab, "spark2", "spark3", "spark4")
    # A 15 s lease (the role's least is 10 s and 3 progress readings, 6 s here) and
    # twin a's streams at 1 MB/s: their 48 MiB take 50 s, while the sender stops at
    # most 15 s after the last reading before the Ctrl-C, which comes once spark4
    # receives (seconds after the start): what stops the sender is the lease, not the
    # end of the transfer, with twice the time to spare.
    slow_port("spark2", "a", "--rate", str(LEASE_RATE_MBIT))
    proc, output = _sync_running(tmp_path, "-e", f"model_cache_lease_timeout={LEASE_S}")
    try:
        _wait_moving(lab, proc, "spark4")
        assert _chain_left(lab, bound=0)  # the chain runs now, on every node of it
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert rc != 0, output()[-3000:]
    # The lease, then each hop's end of its next one: at once when the hop before it
    # ends, or else the hop's own idle bound (2 x model_cache_stall_timeout + 30 s,
    # 150 s by default), and 30 s to spare.
    assert _chain_left(lab, bound=LEASE_S + 150 + 30) == {}
    board = _board(lab)
    assert board.get("finished") is True
    assert "nobody read this transfer's progress" in str(board.get("error")), board
    # partial files stay until the next sync's comparison clears them; the port at
    # the lab's rate again, the next sync need not crawl through it
    slow_port("spark2", "a", "--rate", str(lab.inventory.cluster_var("lab_link_rate_mbit", 1000)))
    rc, _, again = _sync()
    assert rc == 0, again[-3000:]
    for node in lab.inventory.nodes[1:]:
        assert not ssh(node.mgmt_ip, f"find {CACHE} -name '*.sparkctl-partial'").stdout.strip()
