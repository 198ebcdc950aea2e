"""The SGLang firewall after start: the units' ordering against nftables.service,
the SGLang unit's own check for the chain, and `serve verify`'s reading of it.

The nft outputs are real: fixtures of nftables 1.0.6 (tests/fixtures/nft,
SOURCES.md), and, where this machine has `nft` and may make a network namespace
(root, `unshare -n`), the real nft run on the rendered template in a fresh
namespace, with the table loaded, its chain deleted or the ruleset flushed, as
nftables.service's start or stop does.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from sparkctl.inventory import load
from sparkctl.report.model import Report, Thresholds
from sparkctl.serve import firewall
from sparkctl.serve.service import Verified
from tests.unit import plans
from tests.unit import test_sglang_role as role

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "nft"
SIM = ROOT / "inventory" / "sim.ini"
NFT = shutil.which("nft") or "/usr/sbin/nft"
FW_UNIT = "sparkctl-sglang-firewall.service"


def _nft_file(port: int = 30000) -> str:
    """sglang-firewall.nft.j2 as the role renders it for test_sglang_role's cluster."""
    wanted = role.fw.sglang_nft_expected(role.FABRIC, role.FABRIC_PORTS, port, role.API, role.PEERS)
    return role._render(
        "sglang-firewall.nft.j2",
        {
            "_sglang_fw_chain": "sglang_input",
            "_sglang_fw": wanted,
            "_sglang_fw_fabric_ports": "{ 50000-50015, 32768-60999 }",
            "sglang_port": port,
            "_sglang_fw_unit": FW_UNIT,
        },
    )


def _can_netns() -> bool:
    if not Path(NFT).exists() or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-n", NFT, "list", "ruleset"], capture_output=True, check=False
    )
    return probe.returncode == 0


needs_nft = pytest.mark.skipif(
    not _can_netns(), reason="needs nft and a network namespace (root, unshare -n)"
)


def _in_netns(tmp_path: Path, after_load: str, command: str) -> tuple[int, str]:
    """``command`` in a fresh network namespace where the role's file was loaded and then
    ``after_load`` ran: (exit code, stdout then stderr), as the ssh runner returns it."""
    # One file per call: the cluster runs its hosts' commands in parallel threads, and
    # a file another thread is rewriting would be read half-written.
    rules = tmp_path / f"sglang-firewall-{threading.get_ident()}-{time.monotonic_ns()}.nft"
    rules.write_text(_nft_file())
    script = f"{NFT} -f {shlex.quote(str(rules))} || exit 99\n{after_load}\n{command}\n"
    proc = subprocess.run(
        ["unshare", "-n", "sh", "-c", script], capture_output=True, text=True, check=False
    )
    assert proc.returncode != 99, proc.stderr
    return proc.returncode, proc.stdout + proc.stderr


# ------------------------------------------------------------------ the judgement
def test_the_loaded_table_passes() -> None:
    check = firewall.judge(
        "spark1", "rank 0", 0, (FIXTURES / "sparkctl_table_loaded.json").read_text(), 30000
    )
    assert check.outcome == "passed", check.message
    assert check.message.startswith("chain sglang_input of table inet sparkctl on input")
    assert "the API port 30000 only from 10.77.0.0/24" in check.message


def test_a_flushed_ruleset_fails_naming_the_firewall_and_the_node() -> None:
    check = firewall.judge(
        "spark3", "rank 2", 1, (FIXTURES / "sparkctl_table_flushed.txt").read_text(), 30000
    )
    assert check.outcome == "failed"
    assert check.message == (
        "spark3: the SGLang firewall is gone: table inet sparkctl is not loaded "
        "(nft: Error: No such file or directory); the API and the ranks' ports are unfiltered"
    )


def test_a_deleted_chain_fails_and_so_does_one_that_no_longer_drops_the_api_port() -> None:
    gone = firewall.judge(
        "spark2", "rank 1", 0, (FIXTURES / "sparkctl_chain_deleted.json").read_text(), 30000
    )
    assert gone.outcome == "failed"
    assert "spark2: the SGLang firewall is not in force: chain sglang_input is gone" in gone.message
    other_port = firewall.judge(
        "spark2", "rank 1", 0, (FIXTURES / "sparkctl_table_loaded.json").read_text(), 31000
    )
    assert "no rule of chain sglang_input drops the API port 31000" in other_port.message
    garbage = firewall.judge("spark2", "rank 1", 0, "<html>", 30000)
    assert garbage.outcome == "failed" and "not nft -j output" in garbage.message


@needs_nft
@pytest.mark.parametrize(
    ("after_load", "fixture", "rc"),
    [
        ("", "sparkctl_table_loaded.json", 0),
        (f"{NFT} delete chain inet sparkctl sglang_input", "sparkctl_chain_deleted.json", 0),
        (f"{NFT} flush ruleset", "sparkctl_table_flushed.txt", 1),
    ],
)
def test_the_fixtures_are_what_this_nft_prints(
    tmp_path: Path, after_load: str, fixture: str, rc: int
) -> None:
    got_rc, got = _in_netns(tmp_path, after_load, f"{NFT} -j list table inet sparkctl")
    assert got_rc == rc
    want = (FIXTURES / fixture).read_text()
    if rc:
        assert got == want
    else:  # handles differ with what the kernel allocated: compare what the parser reads
        fw = firewall.parser()
        assert fw.sglang_nft_rules(got) == fw.sglang_nft_rules(want)


# ---------------------------------------------------- serve verify, over the runner
@needs_nft
def test_serve_verify_reads_every_ranks_table_and_names_the_flushed_one(
    tmp_path: Path,
) -> None:
    """The real Cluster's commands, each run by the real nft in a namespace of its own:
    spark3's ruleset was flushed after the firewall loaded (nftables.service started)."""
    commands: list[str] = []

    def runner(host: str, command: str, timeout: int) -> tuple[int, str]:
        commands.append(command)
        if command.startswith("systemctl show -p BindsTo --value"):
            return 0, f"{FW_UNIT} docker.service\n"
        fault = f"{NFT} flush ruleset" if host == "spark3" else ""
        return _in_netns(tmp_path, fault, command)

    inv = load(SIM)
    cluster = plans.cluster(inv, {"port": 30000}, runner, tmp_path)
    checks = {c.host: c for c in firewall.checks(cluster)}
    assert {n: c.outcome for n, c in checks.items()} == {
        "spark1": "passed",
        "spark2": "passed",
        "spark3": "failed",
        "spark4": "passed",
    }
    assert checks["spark3"].message.startswith(
        "spark3: the SGLang firewall is gone: table inet sparkctl is not loaded"
    )
    assert checks["spark3"].subject == "rank 2 (spark3)"
    assert "nft -j list table inet sparkctl" in commands
    # ... and the command's one line names it, beside the ranks
    report = Report(
        run_id="r",
        cluster="sim",
        inventory=str(SIM),
        started="2026-01-01T00:00:00Z",
        sparkctl_version="0",
        hosts=cluster.nodes,
        thresholds=Thresholds(0.0, 0.0, 0, 0.0),
    )
    report.checks = list(checks.values())
    error = Verified(report, tmp_path, SIM).failure()
    assert error is not None
    assert error.message.startswith(
        "serve verify failed: firewall: spark3: the SGLang firewall is gone"
    )


def test_a_unit_bound_to_no_firewall_is_skipped_and_its_table_not_read(tmp_path: Path) -> None:
    commands: list[str] = []

    def runner(host: str, command: str, timeout: int) -> tuple[int, str]:
        commands.append(command)
        return (0, "docker.service\n") if "BindsTo" in command else (1, "unexpected")

    cluster = plans.cluster(load(SIM), {}, runner, tmp_path)
    checks = firewall.checks(cluster)
    assert {c.outcome for c in checks} == {"skipped"}
    assert "sglang_firewall_enabled false" in checks[0].message
    assert not [c for c in commands if "nft" in c]


# ------------------------------------------------------------------ the units
def test_the_firewall_unit_follows_nftables_service() -> None:
    unit = role._render(
        "sparkctl-sglang-firewall.service.j2",
        {
            "_sglang_fw_chain": "sglang_input",
            "_sglang_unit": "sparkctl-sglang.service",
            "_sglang_fw_file": "/etc/sparkctl/sglang-firewall.nft",
        },
    )
    lines = unit.splitlines()
    for setting in (
        "After=local-fs.target nftables.service",
        "PartOf=nftables.service",
        "ReloadPropagatedFrom=nftables.service",
        "WantedBy=multi-user.target nftables.service",
        "ExecStop=-/usr/sbin/nft delete chain inet sparkctl sglang_input",
    ):
        assert setting in lines, setting
    assert unit.index("\nPartOf=") < unit.index("\n[Service]") < unit.index("\nWantedBy=")


def _check_argv(method: str, *, firewall_on: bool = True) -> list[str] | None:
    unit = role._render(
        "sparkctl-sglang.service.j2", role._unit_context(method, firewall=firewall_on)
    )
    pre = [ln for ln in unit.splitlines() if ln.startswith("ExecStartPre=+")]
    if not pre:
        return None
    (line,) = pre
    return shlex.split(line.removeprefix("ExecStartPre=+").replace("$$", "$"))


def test_the_sglang_unit_checks_for_the_chain_only_with_the_firewall() -> None:
    for method in ("venv", "container"):
        argv = _check_argv(method)
        assert argv is not None and argv[0] == "/bin/sh" and argv[-1] == "sglang_input", argv
        assert _check_argv(method, firewall_on=False) is None


@needs_nft
def test_the_sglang_units_check_fails_once_the_ruleset_is_flushed(tmp_path: Path) -> None:
    """The ExecStartPre= line as systemd splits it, run against the real nft: silent and
    0 with the chain loaded, non-zero saying why once nftables flushed the ruleset."""
    argv = _check_argv("venv")
    assert argv is not None
    argv = [NFT if a == "/usr/sbin/nft" else a.replace("/usr/sbin/nft", NFT) for a in argv]
    command = shlex.join(argv)
    assert _in_netns(tmp_path, "", command) == (0, "")
    rc, said = _in_netns(tmp_path, f"{NFT} flush ruleset", command)
    assert rc != 0 and "No such file or directory" in said
    rc, said = _in_netns(tmp_path, f"{NFT} delete chain inet sparkctl sglang_input", command)
    assert rc != 0 and "No such file or directory" in said


def test_the_judgement_reads_with_the_roles_own_parser() -> None:
    """One reader of `nft -j` output: the role's filter file, not a copy."""
    loaded, tested = firewall.parser().__file__, role.fw.__file__
    assert loaded is not None and tested is not None
    assert Path(loaded).samefile(tested)
