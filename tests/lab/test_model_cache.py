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
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import SIM_INVENTORY, LabSession, assert_unchanged, sparkctl
from tests.labhost import ssh

pytestmark = pytest.mark.lab

MODEL_DIR = "/srv/sparkctl-model/synthetic"
CACHE = "/var/lib/sparkctl/models"
COPY = f"{CACHE}/synthetic"
SIZE_MIB = 96
SOURCE = ["-e", "model_cache_source=head", "-e", f"model_cache_head_dir={MODEL_DIR}"]


def _sync(
    *args: str, inventory: Path = SIM_INVENTORY, env: dict[str, str] | None = None
) -> tuple[int, dict[str, object], str]:
    proc = sparkctl(
        "model", "sync", str(inventory), "--json", *SOURCE, *args, timeout=1800, env=env
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
    assert len(want) == 5  # config.json and four shards
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
    ssh(
        spark4,
        f"t=$(stat -c %y {shard}) && printf 'Y' | dd of={shard} bs=1 seek=10 "
        f'conv=notrunc status=none && touch -d "$t" {shard}',
    )
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
    """The lab's Hugging Face Hub (sparkctl/lab/standins/hfhub.py) on lab-switch, where
    huggingface.co is for a Spark: one repository of 3 MiB, a token required, bodies served
    at 256 KiB/s so that a download lasts long enough to be watched. Yields (endpoint,
    commit, token); removes the Hub and its files afterwards."""
    assert lab.inventory.switch is not None
    switch = lab.inventory.switch.mgmt_ip
    token = "hf_sparkctlSentinel" + "7" * 20
    script = (
        Path(__file__).resolve().parents[2] / "sparkctl" / "lab" / "standins" / "hfhub.py"
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
