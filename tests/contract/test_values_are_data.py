"""Values are data: no inventory value runs, whatever its form, in any command.

A template in an inventory value (a lookup, a filter, a statement) is refused on the
raw value before anything is templated, by ``inventory check`` and by the preflight
play alike; each payload here would create a marker file if it ran. A pure
``{{ reference }}`` passes; a ``!unsafe`` value is the literal it is; ``-e`` values
are judged with the inventory. The YAML guard reads the inventory whatever its
suffix, and the whole check has a deadline.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from sparkctl import inventory, paths
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.rules import data
from tests.contract.test_inventory_types import _ansible_playbook
from tests.unit.cli_run import check_cli, run_cli

ROOT = Path(__file__).resolve().parents[2]
VALID = ROOT / "tests" / "fixtures" / "bad_inputs" / "_valid"


@pytest.fixture
def inv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the corpus' valid inventory (two Sparks and a switch, TEST-NET
    addresses nothing answers at); the marker a payload would create is
    ``tmp_path / "ran"``."""
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("NO_COLOR", "1")
    shutil.copytree(VALID, tmp_path / "inv")
    return tmp_path / "inv" / "tiny.ini"


def _payload(marker: Path) -> str:
    return "{{ lookup('ansible.builtin.pipe', 'touch " + str(marker) + "') }}"


def _vars(inv: Path, text: str) -> Path:
    path = inv.parent / "group_vars" / "tiny" / "zz.yml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text",
    [
        'base_headless: "@P@"\n',
        'roce_fabric_sysctls: {rp_filter: "@P@"}\n',
        'base_chrony_upstream: ["pool.example", "@P@"]\n',
        'nccl_env_overrides: {"@P@": "1"}\n',  # a mapping's key
        "base_headless: \"{% if lookup('ansible.builtin.pipe', 'touch @M@') %}x{% endif %}\"\n",
        'base_headless: "{# a comment #}true"\n',
        'base_headless: "{{ fabric_a_subnet | lower }}"\n',  # a filter: not a pure reference
        'base_headless: "{{ hostvars.spark1.x }}"\n',  # an attribute: not a pure reference
    ],
    ids=[
        "value",
        "nested-value",
        "list-item",
        "mapping-key",
        "statement",
        "comment",
        "filter",
        "attribute",
    ],
)
def test_a_template_is_refused_and_never_runs(
    inv: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    text: str,
) -> None:
    marker = inv.parent.parent / "ran"
    where = _vars(inv, text.replace("@P@", _payload(marker)).replace("@M@", str(marker)))
    code, output = check_cli(monkeypatch, capsys, inv)
    assert code == ExitCode.BAD_INPUT, output
    assert "is a template" in output, output
    assert f"{where}:1:" in output, output  # the file and line
    assert not marker.exists()


def test_a_template_in_the_ini_file_is_refused_naming_the_host(
    inv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = inv.parent.parent / "ran"
    text = inv.read_text().replace("node_rank=1", f'node_rank=1 base_headless="{_payload(marker)}"')
    inv.write_text(text)
    code, output = check_cli(monkeypatch, capsys, inv)
    assert code == ExitCode.BAD_INPUT, output
    assert "host spark2: variable base_headless: is a template" in output, output
    assert not marker.exists()


def test_a_pure_reference_passes_and_resolves(
    inv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _vars(inv, 'sglang_firewall_fabric_cidrs: ["{{ fabric_a_subnet }}", "{{fabric_b_subnet}}"]\n')
    code, output = check_cli(monkeypatch, capsys, inv)
    assert code == 0, output
    loaded = inventory.validate(inv)
    assert loaded.hostvars["spark1"]["sglang_firewall_fabric_cidrs"] == [
        "192.168.100.0/24",
        "192.168.101.0/24",
    ]


def test_the_controller_variables_are_sparkctls_and_resolve(
    inv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt")
    _vars(inv, 'model_cache_ca_bundle: "{{ sparkctl_pip_cert }}"\n')
    loaded = inventory.validate(inv)
    assert loaded.hostvars["spark1"]["model_cache_ca_bundle"] == (
        "/etc/ssl/certs/ca-certificates.crt"
    )
    assert paths.controller_vars()["sparkctl_state_dir"] == str(tmp_path / "state")
    _vars(inv, "sparkctl_state_dir: /srv/sparkctl\n")
    code, output = check_cli(monkeypatch, capsys, inv)
    assert code == ExitCode.BAD_INPUT, output
    assert "variable sparkctl_state_dir: is set by sparkctl for every run" in output, output


def test_an_unsafe_value_is_the_literal_it_is(
    inv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``!unsafe`` is never rendered: not a template, judged by the variable's format."""
    marker = inv.parent.parent / "ran"
    _vars(inv, f'fabric_a_netdev: !unsafe "{_payload(marker)}"\n')
    code, output = check_cli(monkeypatch, capsys, inv)
    assert code == ExitCode.BAD_INPUT, output
    assert "is a template" not in output, output
    assert "variable fabric_a_netdev:" in output and "is not a Linux interface name" in output
    assert not marker.exists()


def test_references_that_multiply_or_loop_are_refused_in_milliseconds(
    inv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [f'v{i}: "' + ("{{ v" + str(i + 1) + " }}") * 8 + '"' for i in range(30)]
    lines += ['v30: "xxxxxxxx"', 'loop_a: "{{ loop_b }}"', 'loop_b: "{{ loop_a }}"']
    _vars(inv, "\n".join(lines) + "\n")
    started = time.monotonic()
    code, output = check_cli(monkeypatch, capsys, inv)
    assert code == ExitCode.BAD_INPUT, output
    assert "variable v0: refers to variables that expand to more than" in output, output
    assert "variable loop_a: refers to itself" in output, output
    assert time.monotonic() - started < 30  # a bound on a hang, not a benchmark


def test_expansion_is_counted_not_built() -> None:
    variables = {f"v{i}": ("{{ v" + str(i + 1) + " }}") * 2 for i in range(200)}
    variables["v200"] = "x"
    assert set(data.expansion_problems(variables)) == {f"v{i}" for i in range(200 - 16)}


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ("base_headless={{ lookup('ansible.builtin.pipe', 'id') }}", "is a template"),
        ("base_headless={{ fabric_a_subnet }}", "values given with -e are data"),
        ('{"a": {"b": ["{% raw %}x{% endraw %}"]}}', "is a template (at b[0])"),
        ("sparkctl_state_dir=/tmp", "is set by sparkctl for every run"),
        ("node_rank=0", "host spark2: variable node_rank: rank 0 is also spark1's"),
        ("roce_fabric_mtu=9000.0", "variable roce_fabric_mtu: 9000.0 is a number"),
    ],
    ids=["lookup", "reference", "nested", "controller-var", "rank", "type"],
)
def test_extra_vars_are_judged_before_any_contact(
    *,
    inv: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: str,
    says: str,
) -> None:
    """provision -e ...: exit 2 naming -e, before ansible-playbook or ssh could start
    (both would find a recorder first on PATH)."""
    bin_dir, marker = tmp_path / "bin", tmp_path / "contacted"
    bin_dir.mkdir()
    for tool in ("ssh", "scp", "sftp", "ssh-keyscan", "ansible-playbook"):
        (bin_dir / tool).write_text(f"#!/bin/sh\necho {tool} >> '{marker}'\nexit 255\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    code, output = run_cli(monkeypatch, capsys, "provision", str(inv), "-e", extra)
    assert code == ExitCode.BAD_INPUT, output
    assert "-e: " in output and says in output, output
    assert not marker.exists()


def test_a_yaml_inventory_without_a_yaml_suffix_is_guarded(
    inv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bomb = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    bomb += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    path = inv.parent / "cluster.ini"
    path.write_text("all:\n  vars:\n" + "".join(f"    {line}\n" for line in bomb))
    started = time.monotonic()
    code, output = check_cli(monkeypatch, capsys, path)
    assert code == ExitCode.BAD_INPUT, output
    assert "expands to more than" in output, output
    assert time.monotonic() - started < 30


def test_the_whole_check_has_a_deadline(inv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(path: Path, overlay: Path | None = None) -> inventory.Inventory:
        time.sleep(5)
        raise AssertionError("the deadline did not fire")

    monkeypatch.setattr(inventory, "load", slow)
    monkeypatch.setattr(inventory, "CHECK_DEADLINE_SECONDS", 0.2)
    started = time.monotonic()
    with pytest.raises(SparkctlError) as refused:
        inventory.validate(inv)
    assert refused.value.code == ExitCode.BAD_INPUT
    assert "took longer than 0.2 s" in refused.value.message
    assert time.monotonic() - started < 4


def _preflight_play(inv: Path) -> subprocess.CompletedProcess[str]:
    """Plain ansible-playbook of playbooks/preflight.yml on ``inv``, as the other play
    tests run it (test_inventory_types), in the fixture's tmp dir."""
    return _ansible_playbook(inv.parent.parent, inv, "preflight.yml")


def test_the_preflight_play_refuses_a_template_without_running_it(
    inv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain ansible-playbook: the filter judges the raw values before reading any."""
    marker = inv.parent.parent / "ran"
    _vars(inv, f'base_headless: "{_payload(marker)}"\n')
    proc = _preflight_play(inv)
    assert proc.returncode != 0, proc.stdout
    assert "variable base_headless: is a template" in proc.stdout, proc.stdout[-3000:]
    assert not marker.exists()


def test_in_a_play_a_name_nothing_reads_never_renders(
    inv: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A play holds other tools' variables (molecule's lookups): the guard neither
    renders nor refuses a name no role reads there; `inventory check`, sparkctl's own
    gate, refuses it all the same."""
    marker = inv.parent.parent / "ran"
    _vars(inv, f'harness_setting: "{_payload(marker)}"\n')
    proc = _preflight_play(inv)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not marker.exists()
    code, output = check_cli(monkeypatch, capsys, inv)
    assert code == ExitCode.BAD_INPUT, output
    assert "variable harness_setting: is a template" in output, output
    assert not marker.exists()


def test_in_a_play_what_a_read_name_refers_to_is_judged_too(inv: Path) -> None:
    """Rendering a variable a role reads renders what it refers to: a lookup behind a
    pure reference is refused in the play as well, before anything renders."""
    marker = inv.parent.parent / "ran"
    _vars(
        inv, f'harness_setting: "{_payload(marker)}"\nbase_headless: "{{{{ harness_setting }}}}"\n'
    )
    proc = _preflight_play(inv)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "variable harness_setting: is a template" in proc.stdout, proc.stdout[-3000:]
    assert not marker.exists()
