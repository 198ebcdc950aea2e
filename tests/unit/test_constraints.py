"""The schema's constraints: each role's meta/constraints.yml, read by sparkctl.rules.

Types come from argument_specs; ranges, formats and allowed characters from
constraints.yml, declared once per role and enforced by `inventory check` and by the
preflight play (tests/unit/test_bad_input_corpus.py runs the cases). Here: the
declarations are well-formed, name real variables, hold for the roles' own defaults,
each has at least one case in the bad-input corpus, and the formats and ranges judge
what they say.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.rules import schema as rules
from sparkctl.rules.formats import FORMATS

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "ansible_collections" / "sparkctl" / "spark" / "roles"
CORPUS = REPO / "tests" / "fixtures" / "bad_inputs"


def _constraints() -> dict[str, tuple[str, dict[str, Any]]]:
    return rules.load_constraints(ROLES)


def _check_shape(name: str, constraint: dict[str, Any]) -> None:
    unknown = set(constraint) - rules._CONSTRAINT_KEYS
    assert not unknown, f"{name}: unknown constraint keys {sorted(unknown)}"
    if "format" in constraint:
        assert constraint["format"] in FORMATS, f"{name}: no format {constraint['format']}"
    for part in ("items", "keys", "values"):
        if part in constraint:
            _check_shape(f"{name}.{part}", constraint[part])
    for field, inner in (constraint.get("fields") or {}).items():
        _check_shape(f"{name}.{field}", inner)


def test_every_constraint_is_well_formed_and_names_a_declared_variable() -> None:
    constraints = _constraints()
    assert len(constraints) >= 40  # the roles declare their values' shapes
    specs = rules.load_specs(ROLES)
    for name, (role, constraint) in constraints.items():
        assert name in specs, f"roles/{role}/meta/constraints.yml: {name} is not in argument_specs"
        assert specs[name][0] == role, (
            f"{name}: declared by {specs[name][0]}, constrained by {role}"
        )
        assert constraint, f"{name}: empty constraint"
        _check_shape(name, constraint)


def _literal_defaults(role: str) -> dict[str, Any]:
    path = ROLES / role / "defaults" / "main.yml"
    data = yaml.safe_load(path.read_text()) if path.exists() else {}
    return {k: v for k, v in (data or {}).items() if "{{" not in repr(v)}


def test_the_roles_own_defaults_meet_their_constraints() -> None:
    checked = 0
    for name, (role, constraint) in _constraints().items():
        defaults = _literal_defaults(role)
        if name in defaults:
            checked += 1
            assert rules.constraint_problem(defaults[name], constraint) is None, (
                f"roles/{role}/defaults/main.yml: {name}: {defaults[name]!r}"
            )
    assert checked >= 20


def test_every_constraint_has_a_case_in_the_bad_input_corpus() -> None:
    covered: set[str] = set()
    files = sorted(CORPUS.glob("cases/*.yml"))
    assert files, f"no case files in {CORPUS / 'cases'}"
    for path in files:
        for case in (yaml.safe_load(path.read_text()) or {}).get("cases") or []:
            variable = (case.get("expect") or {}).get("variable")
            if variable:
                covered.add(str(variable).split(".", 1)[0])
    missing = sorted(set(_constraints()) - covered)
    assert not missing, (
        "constraints without a bad-input case (tests/fixtures/bad_inputs/cases/): "
        + ", ".join(missing)
    )


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        (
            "word",
            ["--enable-metrics", "--mem-fraction-static=0.8"],
            ["a b", "--x\n", "$(id)", "a;b", "'q'", ""],
        ),
        ("env_name", ["NCCL_DEBUG", "_X1"], ["1X", "A-B", "A\n", "reboot\n"]),
        ("env_value", ["^mlx5_0", "1", ""], ["a b", "1\n", "$X", "#c", "'q'"]),
        (
            "abs_path",
            ["/etc/sparkctl/nccl.env", "/", "/opt/x/"],
            ["etc/x", "/../../tmp/x", "/a/../b", "/a//b", "/a\n", "/a b", "~/x"],
        ),
        ("controller_path", ["~/.ssh/id", "/srv/models", "~"], ["../x", "~/../x", "~root/x"]),
        (
            "unit_path",
            ["/var/lib/sparkctl/models/current", "/srv/sparkctl-model/mol", "/"],
            ["/a:/etc", "/etc/%H.env", "/a,b", "/../x", "/a\n", "x/y"],
        ),
        (
            "ifname",
            ["enp1s0f1np1", "enP2p1s0f1np1", "eth0.100"],
            ["", ".", "..", "a/b", "a:b", "a b", "abcdefghijklmnop"],
        ),
        ("ipv4", ["10.77.0.1"], ["10.77.0.1 ", "10.77.0.256", "::1", "10.77.0.0/24"]),
        ("ipv4_network", ["10.77.0.0/24", "10.77.0.5/24", "10.77.0.5"], ["10.77.0.0/33", "x"]),
        (
            "hf_repo",
            ["Qwen/Qwen3-235B-A22B-FP8", "org/name.v2"],
            ["name", "a/b/c", "/a", "a/b\n", "org/..", "org/a--b", "-org/x", "o/" + "x" * 97],
        ),
        ("git_sha", ["0" * 40], ["0" * 39, "0" * 40 + "\n", "G" * 40, "main"]),
        ("version", ["580", "2.28.9"], ["2.28.9-1", "v2", "2..9", ""]),
        (
            "pip_version",
            ["0.5.17", "0.5.12.post1", "1.0rc2", "2.4.0.dev1"],
            ["0.5.17 ", "v0.5.17", ">=0.5", "0.5.17; reboot", "0.5.17\n", "latest", ""],
        ),
        (
            "https_url",
            ["https://developer.download.nvidia.com/compute/cuda/repos/x.deb"],
            ["http://x", "https://x/a?b=c", "https://x/a;id", "file:///etc/passwd"],
        ),
        (
            "http_url",
            ["https://huggingface.co", "http://10.77.0.2:8999"],
            ["ftp://x", "http://x/a?b=c", "http://x\n", "https://x/$(id)"],
        ),
        (
            "image_ref",
            ["lmsysorg/sglang:v0.5.17-cu130-runtime", "localhost:5000/sglang:x"],
            ["Lmsys/sglang", "a b", "x:y:z:w"],
        ),
        ("digest", ["sha256:" + "a" * 64], ["sha256:" + "a" * 63, "md5:x"]),
        (
            "hostport_list",
            ["30000", "32768-60999", "1", "65535"],
            ["0", "70000", "60999-32768", "1-65536", "80,443", "80\n", ""],
        ),
        ("digits", ["580", "0"], ["580.0", "580-1", "", "5 8", "580\n"]),
        (
            "ssh_ciphers",
            ["aes128-gcm@openssh.com", "chacha20-poly1305@openssh.com,aes256-ctr"],
            ["AES128-CTR", "aes128_ctr", "-oProxyCommand=x", "aes:x", "", "aes128-ctr\n"],
        ),
        ("dashed_version", ["13-0", "13", "12-8"], ["13.0", "13-", "-0", "", "13-0\n"]),
        (
            "release_tag",
            ["v2.28.9-1", "v2.18.3", "2.28.9"],
            ["v2.28", "2.28.9-1-x", "master", "v2.28.9-1\n", "v2.28.9;id", ""],
        ),
        (
            "ibdev",
            ["rocep1s0f1", "roceP2p1s0f0", "mlx5_0:1"],
            ["mlx5_0,mlx5_1", "^mlx5_0", "mlx5_0:", "rocep1s0f1\n", ""],
        ),
        ("auto_or_int", ["auto", "3", "0"], ["Auto", "-1", "3\n", "$(id)", ""]),
        ("auto_bool", ["auto", "true", "False", "yes", "no"], ["required", "1", "auto\n", ""]),
        ("power_of_two", ["1", "1048576", "4294967296"], ["0", "1000000", "-4", "1e6", "", "4\n"]),
        (
            "prom_duration",
            ["15s", "1m", "1m30s", "15d", "52w", "500ms", "1y2w3d4h5m6s7ms"],
            ["", "0s", "0d", "15", "1.5m", "30s1m", "15s; id", "15S", "15s\n", "-1s"],
        ),
        (
            "host_port",
            ["10.77.0.1:9100", "controller.example.org:9100", "my_host:1"],
            ["controller", ":9100", "10.77.0.1:0", "h:65536", "h:9100\n", "a b:1", "h:p"],
        ),
        (
            "breakout",
            ["2x", "4x", "2x200G", "2x200G[100G,50G,40G,25G,10G,1G]", "4x100G[50G,25G,10G,1G]"],
            ["2", "x2", "2x200", "2x200G[", "2x200G]", "2x 200G", "2x;id", "9x", "", "2x\n"],
        ),
    ],
)
def test_formats(fmt: str, good: list[str], bad: list[str]) -> None:
    ok, _ = FORMATS[fmt]
    assert [v for v in good if not ok(v)] == []
    assert [v for v in bad if ok(v)] == []


def test_ranges_lengths_and_nested_constraints() -> None:
    problem = rules.constraint_problem
    assert problem(9000, {"min": 1280, "max": 9216}) is None
    assert problem(9300, {"min": 1280, "max": 9216}) == "9300 is outside 1280..9216"
    assert problem(0, {"above": 0, "max": 1}) == "0 must be above 0"
    assert problem(0.5, {"above": 0, "max": 1}) is None
    assert problem(1, {"above": 0, "below": 1}) == "1 must be below 1"
    assert problem(0.75, {"above": 0, "below": 1}) is None
    # A value of a type the constraint does not speak of is refused, never passed on
    # unjudged (a range speaks of numbers; a boolean is not one).
    assert problem("auto", {"min": 1}) == "'auto' is a string, but the role needs a number"
    assert problem(True, {"min": 2}) == "True is a boolean, but the role needs a number"
    assert problem(9000.0, {"format": "digits"}) is not None  # not an integer, not text
    assert problem({"a": 1}, {"format": "word"}) is not None
    assert problem(["x"], {"values": {"format": "word"}}) is not None  # a list, no mapping
    assert (
        problem({"NCCL_DEBUG": {"a": 1}}, {"values": {"format": "env_value"}})
        == "NCCL_DEBUG: {'a': 1} is a mapping, but the role needs an integer or a string here"
    )
    assert problem({"A": None}, {"values": {"min": 0, "nullable": True}}) is None
    assert problem({"A": None}, {"values": {"min": 0}}) is not None
    assert problem({"HF_TOKEN": ["hf_secretvalue"]}, {"values": {"format": "env_value"}}) == (
        "HF_TOKEN: the value (not shown) is not an environment value (no blanks, quotes, "
        "backslash, $ or #)"
    )
    assert problem("x" * 9, {"max_length": 8}) == "9 characters: at most 8"
    # fields: a mapping's named keys, each judged by its own constraint, others free.
    port = {"fields": {"breakout": {"type": "str", "format": "breakout"}}}
    assert problem({"node": "spark1", "breakout": "2x"}, port) is None
    assert problem({"node": "spark1"}, port) is None
    assert problem({"breakout": "2x; reboot"}, port) is not None
    assert problem({"breakout": 2}, port) is not None
    assert problem("spark1", port) is not None  # a mapping, by its fields
    assert problem("", {"format": "digest", "allow_empty": True}) is None  # "" is unset
    assert problem("", {"format": "digest"}) == "'' is not an image digest (sha256:64 hex digits)"
    assert problem("sha256:x", {"format": "digest", "allow_empty": True}) is not None
    assert (
        problem(["--a", "b c"], {"items": {"format": "word"}})
        == "item 1: 'b c' is not one word (letters, digits and _ . , : / = @ + -)"
    )
    assert (
        problem({"reboot\n": "1"}, {"keys": {"format": "env_name"}})
        == "key 'reboot\\n' is not an environment variable name"
    )
    env_value = problem({"A": "$(id)"}, {"values": {"format": "env_value"}})
    assert env_value is not None and env_value.startswith("A: '$(id)'")
    secret = {"format": "api_key", "secret": True, "allow_empty": True}
    assert problem("short-key-42", secret) == (
        "the value (not shown) is not a key of 16 or more letters, digits and . _ ~ + / = : -"
    )
    assert problem("k" * 16, secret) is None and problem("", secret) is None
    assert problem("a-key-of-enough-length\nExecStartPre=/bin/id", secret) is not None
