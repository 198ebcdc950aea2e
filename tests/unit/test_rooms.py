"""The product, the collection, the lab and the tests are separate rooms.

- sparkctl (the product) and the collection never import the lab (sparkctl_lab, its own
  distribution in lab/) nor the tests, and name no lab-only path: the lab differs from a
  cluster only by its inventory and the ``sim`` hardware profile.
- The lab plugs ``sparkctl lab`` in through the ``sparkctl.commands`` entry point, and
  without it ``sparkctl lab`` says how to get it.
"""

from __future__ import annotations

import ast
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from sparkctl import cli
from sparkctl.errors import ExitCode, SparkctlError
from tests.conftest import REPO

PRODUCT = (REPO / "sparkctl", REPO / "ansible_collections" / "sparkctl" / "spark" / "plugins")
FORBIDDEN = ("sparkctl_lab", "tests")
# Paths only the lab's nodes have (its stand-ins' hardware record).
LAB_ONLY_PATHS = ("/etc/sparkctl-lab",)


def _python_files() -> Iterator[Path]:
    for root in PRODUCT:
        yield from sorted(root.rglob("*.py"))


def _imported(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            yield str(node.args[0].value)


def _forbidden_imports(source: str) -> list[str]:
    return [
        name
        for name in _imported(ast.parse(source))
        if name.split(".")[0] in FORBIDDEN or name.startswith("sparkctl.lab")
    ]


def test_the_product_and_the_collection_import_neither_the_lab_nor_the_tests() -> None:
    files = list(_python_files())
    assert len(files) > 80
    bad = {
        str(p.relative_to(REPO)): found
        for p in files
        if (found := _forbidden_imports(p.read_text()))
    }
    assert bad == {}


def test_the_check_sees_each_form_of_import() -> None:
    source = (
        "import sparkctl_lab.lab\nfrom sparkctl_lab import cli\nfrom tests.conftest import REPO\n"
        "import importlib\nimportlib.import_module('sparkctl_lab.registry')\n"
        "def f():\n    from sparkctl.lab import x\n"
    )
    assert _forbidden_imports(source) == [
        "sparkctl_lab.lab",
        "sparkctl_lab",
        "tests.conftest",
        "sparkctl_lab.registry",
        "sparkctl.lab",
    ]
    assert _forbidden_imports("from sparkctl import paths\nimport sparkctl.plan\n") == []


def test_no_product_file_names_a_lab_only_path() -> None:
    roots = (*PRODUCT, REPO / "ansible_collections" / "sparkctl" / "spark" / "roles")
    bad = sorted(
        str(p.relative_to(REPO))
        for root in roots
        for p in root.rglob("*")
        if p.is_file()
        and "molecule" not in p.parts
        and p.suffix in {".py", ".yml", ".j2"}
        and any(path in p.read_text(errors="replace") for path in LAB_ONLY_PATHS)
    )
    assert bad == []


def test_the_lab_distribution_plugs_in_its_click_group() -> None:
    lab = tomllib.loads((REPO / "lab" / "pyproject.toml").read_text())["project"]
    assert lab["name"] == "sparkctl-lab"
    target = lab["entry-points"]["sparkctl.commands"]["lab"]
    assert target == "sparkctl_lab.cli:lab"
    from sparkctl_lab import cli as lab_cli  # noqa: PLC0415 -- the lab's side of the plug

    assert isinstance(lab_cli.lab, click.Group)
    # Installed beside sparkctl (scripts/bootstrap.sh), the entry point gives the command,
    # and the command list names it; a built-in command is found without it.
    ctx = click.Context(cli.cli)
    assert cli.cli.get_command(ctx, "lab") is lab_cli.lab
    assert "lab" in cli.cli.list_commands(ctx)
    assert "lab" not in cli.cli.commands
    product = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "entry-points" not in product["project"]
    assert "lab" not in product["tool"]["hatch"]["build"]["targets"]["wheel"]["only-include"]


def test_without_the_lab_sparkctl_lab_says_how_to_get_it() -> None:
    result = CliRunner().invoke(cli.lab_missing, ["up", "--rate", "10"])
    assert isinstance(result.exception, SparkctlError)
    assert result.exception.code == ExitCode.ENVIRONMENT
    assert "sparkctl-lab package" in result.exception.message
    assert result.exception.hint == cli.LAB_HINT
    assert "pip install -e ./lab" in cli.LAB_HINT


def test_an_entry_point_never_shadows_a_built_in_command(monkeypatch: pytest.MonkeyPatch) -> None:
    class Point:
        name, value = "validate", "evil:cmd"

        def load(self) -> click.Command:
            return click.Command("validate")

    builtin = cli.cli.commands["validate"]
    monkeypatch.setattr(cli, "_entry_points", lambda: [Point()])
    ctx = click.Context(cli.cli)
    assert cli.cli.get_command(ctx, "validate") is builtin
    assert cli.cli.list_commands(ctx).count("validate") == 1


def test_without_an_entry_point_lab_is_the_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_entry_points", list)
    ctx = click.Context(cli.cli)
    assert cli.cli.get_command(ctx, "lab") is cli.lab_missing
    assert "lab" in cli.cli.list_commands(ctx)
    assert cli.cli.get_command(ctx, "nosuch") is None


def test_a_built_in_command_starts_without_scanning_the_distributions() -> None:
    """importlib.metadata and the lab are imported only when a plugin command is named
    or the commands are listed."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    code = (
        "import sys\nfrom sparkctl import cli\n"
        "cli.cli.get_command(None, 'validate')\n"
        "print('importlib.metadata' in sys.modules, 'sparkctl_lab' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.split() == ["False", "False"]


# ------------------------------------------------------------ the unit tier's guard
def test_the_unit_tiers_guard_refuses_ansible_playbook_from_the_test_itself() -> None:
    import subprocess  # noqa: PLC0415

    with pytest.raises(OSError, match="the unit tier never starts ansible-playbook"):
        subprocess.run(["ansible-playbook", "--version"], check=False)
    # The refusal is also on record for the teardown check; take it back, as this test
    # provoked it on purpose.
    log = Path(os.environ["SPARKCTL_TIER_GUARD_LOG"])
    mine = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
    lines = log.read_text().splitlines()
    assert f"{mine}\tansible-playbook" in lines
    log.write_text("".join(f"{line}\n" for line in lines if not line.startswith(mine)))


def test_the_unit_tiers_guard_lets_background_threads_start_their_tools() -> None:
    """The session's background work (molecule scenarios, the lab's bring-up) starts
    podman and molecule from threads of its own while unit tests run."""
    import subprocess  # noqa: PLC0415
    import threading  # noqa: PLC0415

    result: list[object] = []

    def start() -> None:
        try:
            proc = subprocess.run(
                ["podman", "--version"], capture_output=True, text=True, check=False
            )
            result.append(proc.returncode)
        except OSError as exc:
            result.append(exc)

    worker = threading.Thread(target=start)
    worker.start()
    worker.join(60)
    assert result and not isinstance(result[0], OSError), result
