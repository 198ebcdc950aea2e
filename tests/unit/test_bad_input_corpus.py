"""The bad-input corpus: every kind of bad inventory is refused before any host is contacted.

Each case of tests/fixtures/bad_inputs/cases/<class>.yml (see the README.md there) is a
list of edits on one valid inventory (``_valid`` or ``_valid_two_groups``), applied to a
copy in the test's tmp dir. ``sparkctl inventory check`` must exit 2 with a line naming
the file, the host and the variable, say what is wrong (and suggest the near miss), never
show a traceback and never echo the case's secret. For a subset spanning every class
(and every case of the classes whose values would reach ssh), ``provision``, ``validate``
and ``serve up`` must stop the same way, with ssh, scp, sftp and ssh-keyscan on PATH
replaced by recorders that nothing may start. A case whose edits hold a template is run
with ``render`` and ``provision`` too: its payload would create a marker file, which must
never appear. A case's -e values go to every command that takes -e (``inventory check``
among them), and an -e case goes through ``provision`` too.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl import cli as sparkctl_cli
from sparkctl.errors import ExitCode
from tests.unit.cli_run import check_cli, run_cli

pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
)

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "bad_inputs"
CASE_FILES = CORPUS / "cases"
COUNTS = CORPUS / "COUNTS.md"
BASES = ("_valid", "_valid_two_groups")
VALID = [CORPUS / name for name in BASES]
# One file per class: a class whose file disappears is a hole, not a pass.
CLASSES = {
    "wrong-type",
    "types-strict",
    "missing-required",
    "address",
    "subnet",
    "switch-os",
    "switch-ports",
    "tp",
    "tp-groups",
    "yaml-syntax",
    "ini-syntax",
    "unreadable",
    "unknown-variable",
    "password",
    "vault",
    "host-key",
    "api-sources",
    "connection",
    "range",
    "format",
    "relation",
    "secret",
    "bomb",
    "templates",
    "gateway",
    "upgrade",
}
# The smallest size of the corpus and of the classes written for strict types and
# templates: a file that lost its cases must not pass as a smaller corpus.
AT_LEAST = {"types-strict": 25, "templates": 15}
AT_LEAST_IN_ALL = 150
FILE_KEYS = {"base", "cases", "passes"}
CASE_KEYS = {"name", "base", "why", "edits", "extra_vars", "expect"}
PASS_KEYS = CASE_KEYS - {"expect"}
EXPECT_KEYS = {"file", "host", "variable", "says", "suggest", "secret"}
EDIT_KINDS = {"set", "delete", "text", "replace", "unreadable"}
# The "file" a problem in an -e value names: -e as a word of the message's line.
EXTRA_VARS = "-e"
NAMES_EXTRA_VARS = re.compile(r"(?<![\w/.-])-e(?![\w-])")
# Placeholders in an edit: the marker a payload would create, and a long repeated text
# (an oversized value without a 100 kB line in the case file).
MARKER = "@MARKER@"
REPEAT = re.compile(r"@REPEAT\((.+?), (\d+)\)@")
# What makes a value a template to Jinja: a payload in one of these must never run.
TEMPLATE = re.compile(r"\{\{|\{%|\{#")
# Vault passwords Ansible would pick up from the environment: none for the corpus.
VAULT_ENV = ("ANSIBLE_VAULT_PASSWORD_FILE", "ANSIBLE_VAULT_IDENTITY_LIST")


@dataclass(frozen=True)
class Case:
    """One entry of a case file: its class (the file's name) and the entry as read."""

    cls: str
    name: str
    base: str
    why: str
    edits: tuple[dict[str, Any], ...]
    extra_vars: tuple[str, ...]
    expect: dict[str, Any]
    passes: bool = False

    @property
    def template(self) -> bool:
        """Whether an edit or an -e value holds a template (a payload that must not run)."""
        return bool(TEMPLATE.search(repr((self.edits, self.extra_vars))))


# libyaml where PyYAML has it: the case files, and a set or delete edit reads and writes one.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _load(text: str) -> Any:
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a SafeLoader


def _dump(data: dict[str, Any]) -> str:
    return "---\n" + yaml.dump(data, Dumper=_DUMPER, sort_keys=False, width=1 << 20)


def _read(path: Path) -> dict[str, Any]:
    data = _load(path.read_text())
    assert isinstance(data, dict), path
    return data


def _entries(path: Path, data: dict[str, Any], key: str) -> list[Case]:
    out = []
    for entry in data.get(key) or []:
        assert isinstance(entry, dict), (path, entry)
        out.append(
            Case(
                cls=path.stem,
                name=str(entry.get("name")),
                base=str(entry.get("base", data.get("base", BASES[0]))),
                why=str(entry.get("why")),
                edits=tuple(entry.get("edits") or ()),
                extra_vars=tuple(entry.get("extra_vars") or ()),
                expect=dict(entry.get("expect") or {}),
                passes=key == "passes",
            )
        )
    return out


def load_corpus() -> tuple[dict[Path, dict[str, Any]], list[Case], list[Case]]:
    """(each case file as read, the cases, the inventories that must pass)."""
    files = {path: _read(path) for path in sorted(CASE_FILES.glob("*.yml"))}
    cases = [c for path, data in files.items() for c in _entries(path, data, "cases")]
    passes = [c for path, data in files.items() for c in _entries(path, data, "passes")]
    return files, cases, passes


FILES, CASES, PASSES = load_corpus()
BY_NAME = {case.name: case for case in CASES}


# --------------------------------------------------------------- the edits
def make_unreadable(path: Path) -> str:
    """Make ``path`` unreadable: chmod 000, or (root reads anything) a link to nowhere."""
    path.chmod(0)
    try:
        path.open("rb").close()
    except PermissionError:
        return "chmod 000"
    path.chmod(0o644)
    path.unlink()
    path.symlink_to(path.with_name(f"{path.name}.missing"))
    return "dangling symlink"


def _fill(value: Any, marker: Path) -> Any:
    """``value`` with @MARKER@ and @REPEAT(text, n)@ replaced, at any depth."""
    if isinstance(value, str):
        value = value.replace(MARKER, str(marker))
        return REPEAT.sub(lambda m: m.group(1) * int(m.group(2)), value)
    if isinstance(value, dict):
        return {_fill(k, marker): _fill(v, marker) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, marker) for v in value]
    return value


def _mapping(files: dict[str, str], name: str) -> dict[str, Any]:
    if name not in files:
        return {}
    data = _load(files[name])
    assert isinstance(data, dict), f"{name}: set/delete need a YAML mapping"
    return data


def apply_edit(files: dict[str, str], edit: dict[str, Any], marker: Path) -> str | None:
    """Apply one edit (README.md) to ``files`` (path in the inventory -> text), in
    memory; the name of the file to make unreadable once written, for that edit."""
    edit = _fill(edit, marker)
    name = edit["file"]
    if "set" in edit:
        files[name] = _dump({**_mapping(files, name), **edit["set"]})
    elif "delete" in edit:
        data = _mapping(files, name)
        missing = [key for key in edit["delete"] if key not in data]
        assert not missing, f"{name}: nothing to delete at {missing}"
        files[name] = _dump({k: v for k, v in data.items() if k not in edit["delete"]})
    elif "text" in edit:
        files[name] = edit["text"]
    elif "replace" in edit:
        old, new = edit["replace"]
        text = files.get(name, "")
        assert text.count(old) == 1, f"{name}: {old!r} is not there exactly once"
        files[name] = text.replace(old, new)
    elif edit.get("unreadable"):
        return str(name)
    else:  # the schema test names the bad edit; this keeps a bad one from passing
        raise AssertionError(f"unknown edit {edit}")
    return None


@functools.cache
def _base_files(base: str) -> dict[str, str]:
    """The files of a base inventory, read once."""
    root = CORPUS / base
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}


def materialise(case: Case, tmp_path: Path) -> tuple[Path, Path]:
    """The case's base with its edits, written under tmp_path: (its directory, its INI).

    The edits are applied in memory and each file written once, a directory made once:
    on an overlay file system a mkdir or an open costs more than the YAML around it.
    """
    dest = tmp_path / case.name
    files = dict(_base_files(case.base))
    unreadable = [apply_edit(files, edit, marker_of(tmp_path)) for edit in case.edits]
    dest.mkdir(parents=True)
    dirs = {Path(name).parents[i] for name in files for i in range(len(Path(name).parts) - 1)}
    for rel in sorted(dirs, key=lambda d: len(d.parts)):  # parents first: one mkdir each
        (dest / rel).mkdir()
    for name, text in files.items():
        (dest / name).write_text(text)
    for name in filter(None, unreadable):
        make_unreadable(dest / name)
    return dest, dest / "tiny.ini"


def marker_of(tmp_path: Path) -> Path:
    """The file a template payload of the case would create (it must never appear)."""
    return tmp_path / "payload-ran"


def extra_args(case: Case, marker: Path) -> list[str]:
    return [arg for value in case.extra_vars for arg in ("-e", _fill(value, marker))]


def assert_names_the_problem(output: str, dest: Path, expect: dict[str, Any]) -> None:
    """One line names the file, host and variable; the output says what is expected."""
    assert "Traceback" not in output, output
    assert "internal error" not in output, output
    if expect["file"] == EXTRA_VARS:  # "-e" as a word: a case's tmp path may hold "-e"
        where = EXTRA_VARS
        lines = [ln for ln in output.splitlines() if NAMES_EXTRA_VARS.search(ln)]
    else:
        where = str(dest / expect["file"])
        lines = [ln for ln in output.splitlines() if where in ln]
    if expect.get("variable"):
        lines = [ln for ln in lines if f"variable {expect['variable']}:" in ln]
    if expect.get("host"):
        lines = [ln for ln in lines if f"host {expect['host']}:" in ln]
    assert lines, (
        f"no line names {where}, host {expect.get('host')}, variable "
        f"{expect.get('variable')}:\n{output}"
    )
    for text in expect["says"]:
        assert text in output, (text, output)
    if expect.get("suggest"):
        assert f"did you mean {expect['suggest']}?" in output, output
    if expect.get("secret"):  # a secret in the case is never echoed back
        assert expect["secret"] not in output, output


@pytest.fixture(autouse=True)
def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("SPARKCTL_DEBUG", raising=False)
    for name in VAULT_ENV:
        monkeypatch.delenv(name, raising=False)


# ---------------------------------------------------------- the case files
def _check_edit(where: str, edit: Any) -> None:
    assert isinstance(edit, dict), where
    kinds = set(edit) & EDIT_KINDS
    assert set(edit) - EDIT_KINDS == {"file"}, (where, sorted(set(edit) - EDIT_KINDS - {"file"}))
    assert len(kinds) == 1, (where, "one of", sorted(EDIT_KINDS), "per edit")
    assert isinstance(edit["file"], str) and edit["file"], where
    assert not Path(edit["file"]).is_absolute() and ".." not in Path(edit["file"]).parts, where
    (kind,) = kinds
    value = edit[kind]
    if kind == "set":
        assert isinstance(value, dict) and value, where
    elif kind == "delete":
        assert isinstance(value, list) and value, where
    elif kind == "text":
        assert isinstance(value, str), where
    elif kind == "replace":
        assert isinstance(value, list) and len(value) == 2, where
        assert all(isinstance(v, str) for v in value) and value[0], where
    else:
        assert value is True, where


def _check_entry(path: Path, entry: Any, keys: set[str], base: str) -> None:
    assert isinstance(entry, dict), (path.name, entry)
    where = f"{path.name}: {entry.get('name')}"
    assert set(entry) <= keys, (where, sorted(set(entry) - keys))
    assert {"name", "why", "edits"} <= set(entry), where
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", entry["name"]), where
    assert entry.get("base", BASES[0]) in BASES, where
    assert isinstance(entry["why"], str) and entry["why"], where
    assert isinstance(entry["edits"], list), where
    assert entry["edits"] or entry.get("extra_vars"), (where, "no edit")
    for edit in entry["edits"]:
        _check_edit(where, edit)
    extra = entry.get("extra_vars", [])
    assert isinstance(extra, list) and all(isinstance(v, str) for v in extra), where
    if "expect" in keys:
        expect = entry.get("expect")
        assert isinstance(expect, dict), where
        assert set(expect) <= EXPECT_KEYS, (where, sorted(set(expect) - EXPECT_KEYS))
        assert isinstance(expect.get("file"), str), (where, "expect.file")
        says = expect.get("says")
        assert says and all(isinstance(s, str) and s for s in says), (where, "expect.says")
        if expect["file"] == EXTRA_VARS:
            assert extra, (where, "names -e without extra_vars")
        else:  # a file of the base or one an edit writes
            there = set(_base_files(entry.get("base", base))) | {e["file"] for e in entry["edits"]}
            assert expect["file"] in there, (where, "expect.file is in no edit", expect["file"])


def per_class() -> Counter[str]:
    return Counter(case.cls for case in CASES)


def counts_table() -> str:
    """COUNTS.md as the case files make it."""
    counts = per_class()
    rows = "".join(f"| {cls} | {counts[cls]} |\n" for cls in sorted(counts))
    return (
        "# Bad-input corpus: cases per class\n\n"
        "Kept in sync with `cases/*.yml` by\n"
        "`tests/unit/test_bad_input_corpus.py::test_the_counts_file_matches_the_cases`.\n\n"
        "| class | cases |\n|---|---|\n"
        f"{rows}| all | {sum(counts.values())} |\n"
    )


def test_the_case_files_hold_known_keys_unique_names_and_every_class() -> None:
    # A new class is a new file (listed here once it is settled); a lost one is a hole.
    assert not CLASSES - {path.stem for path in FILES}, sorted(CLASSES - {p.stem for p in FILES})
    for path, data in FILES.items():
        assert set(data) <= FILE_KEYS, (path.name, sorted(set(data) - FILE_KEYS))
        base = data.get("base", BASES[0])
        assert base in BASES, path.name
        assert data.get("cases"), f"{path.name}: no cases"
        for entry in data["cases"]:
            _check_entry(path, entry, CASE_KEYS, base)
        for entry in data.get("passes") or []:
            _check_entry(path, entry, PASS_KEYS, base)
    names = Counter(case.name for case in [*CASES, *PASSES])
    assert not [n for n, k in names.items() if k > 1], [n for n, k in names.items() if k > 1]
    counts = per_class()
    assert not CLASSES - set(counts), sorted(CLASSES - set(counts))
    for cls, least in AT_LEAST.items():
        assert counts[cls] >= least, (cls, counts[cls], least)
    assert sum(counts.values()) >= AT_LEAST_IN_ALL, sum(counts.values())
    # The per-class counts, for `pytest -rA` readers and release notes.
    print("\n".join(f"{cls}: {counts[cls]}" for cls in sorted(counts)))
    print(f"all: {sum(counts.values())}")


def test_the_type_cases_name_variables_the_roles_declare() -> None:
    """A type case judges a declared variable: a misspelt one would be refused as
    unknown, and the case would test the near-miss rule instead."""
    declared: set[str] = set()
    for spec in CORPUS.parents[2].glob(
        "ansible_collections/sparkctl/spark/roles/*/meta/argument_specs.yml"
    ):
        for entry in (_read(spec).get("argument_specs") or {}).values():
            declared |= set(entry.get("options") or {})
    assert len(declared) > 100, len(declared)
    named = {c.expect.get("variable") for c in CASES if c.cls == "types-strict"}
    assert named and not named - declared, sorted(map(str, named - declared))


def test_the_counts_file_matches_the_cases() -> None:
    """COUNTS.md says how many cases each class has; it is the case files' count
    (`python -m tests.unit.test_bad_input_corpus` rewrites it)."""
    assert COUNTS.read_text() == counts_table(), "COUNTS.md should read:\n" + counts_table()


# ------------------------------------------------------------- the runner
def test_edits_do_what_the_readme_says(tmp_path: Path) -> None:
    """set merges top-level keys, delete drops them, text writes the file, replace
    changes one occurrence, placeholders are filled; a replace that finds nothing fails."""
    files = dict(_base_files("_valid"))
    marker = marker_of(tmp_path)
    cluster = "group_vars/tiny/cluster.yml"
    edits: list[dict[str, Any]] = [
        {"file": cluster, "set": {"roce_fabric_mtu": "9000", "fabric_a_netdev": "x"}},
        {"file": cluster, "delete": ["switch_ports"]},
        {"file": "host_vars/spark2.yml", "text": "a: '@MARKER@'\nb: @REPEAT(ab, 3)@\n"},
        {"file": "tiny.ini", "replace": ["node_rank=1", "node_rank=one"]},
    ]
    assert [apply_edit(files, edit, marker) for edit in edits] == [None] * 4
    data = yaml.safe_load(files[cluster])
    assert data["roce_fabric_mtu"] == "9000" and data["fabric_a_netdev"] == "x"
    assert "switch_ports" not in data and data["hw_profile"] == "dgx_spark"
    assert files["host_vars/spark2.yml"] == f"a: '{marker}'\nb: ababab\n"
    assert "spark2 ansible_host=192.0.2.12 node_rank=one " in files["tiny.ini"]
    assert _base_files("_valid")["tiny.ini"] != files["tiny.ini"]  # the base is untouched
    assert "node_rank=one" not in _base_files("_valid")["tiny.ini"]
    with pytest.raises(AssertionError, match="exactly once"):
        apply_edit(files, {"file": "tiny.ini", "replace": ["node_rank=1", "x"]}, marker)
    with pytest.raises(AssertionError, match="nothing to delete"):
        apply_edit(files, {"file": cluster, "delete": ["switch_ports"]}, marker)
    assert apply_edit(files, {"file": "tiny.ini", "unreadable": True}, marker) == "tiny.ini"


def test_a_case_is_written_with_its_edits(tmp_path: Path) -> None:
    """materialise writes the base and the edits, and makes a file unreadable last."""
    case = Case(
        cls="unreadable",
        name="x",
        base="_valid",
        why="",
        edits=(
            {"file": "host_vars/spark2.yml", "set": {"node_rank": 1}},
            {"file": "host_vars/spark2.yml", "unreadable": True},
        ),
        extra_vars=(),
        expect={},
    )
    dest, ini = materialise(case, tmp_path)
    assert ini.read_text() == (CORPUS / "_valid" / "tiny.ini").read_text()
    assert (dest / "group_vars/tiny/connection.yml").is_file()
    with pytest.raises(OSError):
        (dest / "host_vars/spark2.yml").open("rb").close()


def test_a_line_names_extra_vars_by_the_word_not_by_a_path_that_holds_it() -> None:
    """A case's tmp dir (…/x-extra-vars/) holds "-e"; only the word -e names extra vars."""
    dest = Path("/tmp/t/types-sysctl-value-newline-extra-vars")
    expect = {"file": EXTRA_VARS, "variable": "v", "says": ["bad"]}
    assert_names_the_problem("error: -e: variable v: bad", dest, expect)
    with pytest.raises(AssertionError, match="no line names -e"):
        assert_names_the_problem(f"error: {dest}/tiny.ini: variable v: bad", dest, expect)


@pytest.mark.parametrize("valid", VALID, ids=[p.name for p in VALID])
def test_the_inventories_the_cases_edit_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], valid: Path
) -> None:
    """Each case fails for its one edit, not for something every case shares."""
    shutil.copytree(valid, tmp_path / valid.name)
    code, output = check_cli(monkeypatch, capsys, tmp_path / valid.name / "tiny.ini")
    assert code == 0, output
    assert ": OK" in output, output


def _check_args(case: Case, ini: Path, marker: Path) -> list[str]:
    return ["inventory", "check", *extra_args(case, marker), str(ini)]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_inventory_check_refuses_naming_file_host_and_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], case: Case
) -> None:
    dest, ini = materialise(case, tmp_path)
    code, output = run_cli(monkeypatch, capsys, *_check_args(case, ini, marker_of(tmp_path)))
    assert not marker_of(tmp_path).exists(), "a template in the inventory ran"
    assert code == ExitCode.BAD_INPUT, output
    assert_names_the_problem(output, dest, case.expect)


@pytest.mark.parametrize("case", PASSES, ids=[c.name for c in PASSES])
def test_the_allowed_values_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], case: Case
) -> None:
    """What a class allows (a pure reference to another variable) is not refused."""
    _dest, ini = materialise(case, tmp_path)
    code, output = run_cli(monkeypatch, capsys, *_check_args(case, ini, marker_of(tmp_path)))
    assert not marker_of(tmp_path).exists(), "a template in the inventory ran"
    assert code == 0, output
    assert ": OK" in output, output


def test_unreadable_cases_are_unreadable_the_honest_way(tmp_path: Path) -> None:
    """chmod 000 when it works (not root); a link to nowhere when root reads anyway."""
    path = tmp_path / "f.yml"
    path.write_text("a: 1\n")
    how = make_unreadable(path)
    if os.geteuid() != 0:
        assert how == "chmod 000"
    with pytest.raises(OSError):  # PermissionError, or FileNotFoundError for the link
        path.open("rb").close()


# ----------------------------------------- nothing is contacted, by any command
# A case per kind of failure beyond the first of each class: a load error, a rule, YAML,
# the vault, host keys, passwords, a connection value that would be an ssh line, a
# relation, a plaintext secret, an alias bomb, a range, an injection-style format.
NO_CONTACT_NAMED = {
    "wrong-type-string-for-number",
    "missing-node-rank",
    "address-duplicate-mgmt",
    "yaml-syntax-group-vars",
    "ini-syntax-unknown-section-type",
    "vault-no-password",
    "host-key-strict-no",
    "password-ansible-password",
    "switch-os-junos",
    "connection-user-newline-match-exec",
    "host-key-known-hosts-command",
    "relation-extra-arg-secret",
    "secret-api-key-plaintext",
    "bomb-yaml-aliases",
    "range-switch-mtu-value",
    "format-sglang-extra-args-newline-exec-start-pre",
    "format-nccl-env-extra-key-newline",
}
# Classes whose values would reach ssh (its command line, its config) or a command line
# on the controller: every case of them ("secrets" is the secret rule's file, beside the
# older "secret" cases).
NO_CONTACT_CLASSES = {"connection", "host-key", "password", "secret", "secrets"}
COMMANDS = [("provision",), ("validate",), ("serve", "up")]
# What a template case runs besides `inventory check`: the commands that would template
# a value (render writes every file, provision hands the inventory to Ansible).
TEMPLATE_COMMANDS = [("render",), ("provision",)]


def _takes_extra_vars(*command: str) -> bool:
    """Whether ``sparkctl COMMAND`` has -e (render has none: it reads the inventory only)."""
    cmd: Any = sparkctl_cli.cli
    for word in command:
        cmd = cmd.commands[word]
    return any("-e" in param.opts for param in cmd.params)


def _contact_runs() -> list[Any]:
    """(case, command) for the first case of every class, the named ones, every case of
    the classes that reach ssh, every template and every -e case (each command given
    the -e values; a command without -e is left out for an -e case)."""
    first = {case.cls: case.name for case in reversed(CASES)}
    chosen = NO_CONTACT_NAMED | set(first.values())
    runs = []
    for case in CASES:
        commands: list[tuple[str, ...]] = []
        if case.name in chosen or case.cls in NO_CONTACT_CLASSES:
            commands += COMMANDS
        if case.template:
            commands += [c for c in TEMPLATE_COMMANDS if c not in commands]
        if case.extra_vars and ("provision",) not in commands:  # -e reaches provision too
            commands.append(("provision",))
        runs += [
            pytest.param(case, command, id=f"{case.name}-{'-'.join(command)}")
            for command in commands
            if not case.extra_vars or _takes_extra_vars(*command)
        ]
    return runs


RECORDER = '#!/bin/sh\necho "$(basename "$0") $*" >> \'{marker}\'\nexit 255\n'
CONTACT_RUNS = _contact_runs()


@pytest.fixture
def recorders(tmp_path: Path) -> tuple[Path, Path]:
    """A bin directory whose ssh, scp, sftp and ssh-keyscan record that they ran;
    (bin, marker)."""
    bin_dir, marker = tmp_path / "fake-bin", tmp_path / "contacted"
    bin_dir.mkdir()
    for tool in ("ssh", "scp", "sftp", "ssh-keyscan"):
        stub = bin_dir / tool
        stub.write_text(RECORDER.format(marker=marker))
        stub.chmod(0o755)
    return bin_dir, marker


def test_the_recorders_record(recorders: tuple[Path, Path]) -> None:
    """The check below means something: a started ssh leaves the marker."""
    bin_dir, marker = recorders
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run(
        ["ssh", "-o", "BatchMode=yes", "192.0.2.11", "true"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert proc.returncode == 255
    assert marker.read_text() == "ssh -o BatchMode=yes 192.0.2.11 true\n"


def test_the_contact_runs_span_every_class_and_every_template() -> None:
    """The subset below is not an accident of naming: every class, every template."""
    runs = [p.values for p in CONTACT_RUNS]
    assert {case.cls for case, command in runs if command == ("provision",)} == set(per_class())
    assert not NO_CONTACT_NAMED - BY_NAME.keys(), sorted(NO_CONTACT_NAMED - BY_NAME.keys())
    templates = [c for c in CASES if c.template]
    assert len([c for c in templates if c.cls == "templates"]) >= AT_LEAST["templates"]
    for case in templates + [c for c in CASES if c.extra_vars]:
        assert (case, ("provision",)) in runs, case.name


@pytest.mark.parametrize(("case", "command"), CONTACT_RUNS)
def test_commands_stop_before_contacting_any_host(
    *,
    tmp_path: Path,
    recorders: tuple[Path, Path],
    case: Case,
    command: tuple[str, ...],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The real command, in-process (its own entry point, cli.main): anything it started
    (ansible-playbook, ssh-keyscan) would find the recorders first on PATH."""
    dest, ini = materialise(case, tmp_path)
    bin_dir, contacted = recorders
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("NO_COLOR", "1")
    out = tmp_path / "rendered"
    args = [*command, *extra_args(case, marker_of(tmp_path))]
    if command == ("render",):
        args += ["--out", str(out)]
    code, output = run_cli(monkeypatch, capsys, *args, str(ini))
    assert not marker_of(tmp_path).exists(), "a template in the inventory ran"
    assert code == ExitCode.BAD_INPUT, output
    assert not contacted.exists(), contacted.read_text() if contacted.exists() else ""
    assert_names_the_problem(output, dest, case.expect)
    assert not (tmp_path / "state" / "results").exists(), "a run started"
    assert not out.exists() or not any(out.rglob("*")), sorted(out.rglob("*"))


if __name__ == "__main__":  # rewrite COUNTS.md after adding or removing cases
    COUNTS.write_text(counts_table())
    print(COUNTS.read_text(), end="")
