"""The README is the front door and docs/ holds the detail: the README's command
table lists exactly the commands `sparkctl --help` lists (so a new command cannot
go undocumented), its exit codes are ExitCode's, every relative link in README.md
and docs/*.md resolves to a file (and an #anchor to one of its headings), and the
README stays short."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest
from click.testing import CliRunner

from sparkctl.cli import cli
from sparkctl.errors import ExitCode

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
MAX_README_LINES = 160

_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `# comment` in a shell block is no heading)."""
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def _section(text: str, title: str) -> list[str]:
    lines = _prose(text)
    start = lines.index(f"## {title}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start + 1 : end]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the text without markup, lower case, every
    character but letters, digits, spaces, hyphens and underscores dropped, spaces
    made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a page's headings make, with GitHub's -1, -2 for repeats."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in _prose(path.read_text()):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def relative_links(path: Path) -> list[str]:
    links: list[str] = []
    for line in _prose(path.read_text()):
        text = re.sub(r"`[^`]*`", "", line)  # a link inside code is an example, not a link
        for target in _LINK.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # https:, mailto:
                continue
            links.append(target)
    return links


def _help_commands(args: list[str]) -> list[str]:
    result = CliRunner().invoke(cli, [*args, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    if "Commands:" not in lines:
        return []
    names: list[str] = []
    for line in lines[lines.index("Commands:") + 1 :]:
        m = re.match(r"^  (\S+)", line)
        if not m:
            break
        names.append(m.group(1))
    return names


def cli_commands() -> set[str]:
    """Every command `sparkctl --help` lists; for a group, each of its subcommands as
    `group sub` (from `sparkctl group --help`)."""
    commands: set[str] = set()
    for name in _help_commands([]):
        subs = _help_commands([name])
        commands |= {f"{name} {sub}" for sub in subs} if subs else {name}
    return commands


def readme_commands(text: str) -> dict[str, str]:
    """The README's command table: `sparkctl lab up/down/...` is one row for a group
    and its subcommands. Maps each command to its row."""
    rows: dict[str, str] = {}
    for line in _section(text, "Commands"):
        m = re.match(r"^\|\s*`sparkctl ([^`]+)`", line)
        if not m:
            continue
        words = m.group(1).split()
        assert len(words) in {1, 2}, f"a row names one command or one group: {line}"
        names = [words[0]] if len(words) == 1 else [f"{words[0]} {s}" for s in words[1].split("/")]
        for name in names:
            assert name not in rows, f"{name} listed twice"
            rows[name] = line
    return rows


def test_the_command_table_lists_exactly_the_cli_commands() -> None:
    documented = readme_commands(README.read_text())
    actual = cli_commands()
    assert len(actual) >= 15
    assert set(documented) - actual == set(), "documented but not a command"
    assert actual - set(documented) == set(), "a command the README's table leaves out"


def test_every_command_row_links_to_its_docs_page() -> None:
    for name, row in readme_commands(README.read_text()).items():
        assert re.search(r"\]\(docs/[\w-]+\.md(#[\w-]+)?\)", row), f"{name}: no docs link"


def test_the_exit_codes_table_is_exitcode() -> None:
    """sparkctl/errors.py says its codes are documented in the README: keep that true."""
    codes = [
        int(m.group(1))
        for line in _section(README.read_text(), "Exit codes")
        if (m := re.match(r"^\|\s*(\d+)\s*\|", line))
    ]
    assert codes == sorted(int(c) for c in ExitCode)


def test_the_readme_names_the_test_command_ci_runs() -> None:
    """.ci/run runs scripts/test.sh, the test command the README gives; the two commands
    are written without sudo, the same for root and a sudo user (scripts/_root.sh)."""
    text = README.read_text()
    block = text[text.index("## Two commands") : text.index("## Commands")]
    commands = re.findall(r"```sh\n(.*?)```", block, re.S)[0].splitlines()
    assert [c.split("#")[0].strip() for c in commands] == [
        "scripts/quickstart.sh",
        "scripts/test.sh",
    ]
    assert "scripts/test.sh" in (REPO / ".ci" / "run").read_text()


SOURCE_NOTES = sorted((REPO / "tests" / "fixtures").glob("*/SOURCES.md"))
_REPO_PATH = re.compile(
    r"`((?:sparkctl|lab|tests|ansible_collections|playbooks|benchmarks|scripts)/[\w./-]+\.(?:py|yml|ini))`"
)


@pytest.mark.parametrize("page", PAGES + SOURCE_NOTES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_file_of_this_repository_a_page_names_exists(page: Path) -> None:
    """A module or test moved or renamed takes the pages that name it along."""
    missing = sorted({m for m in _REPO_PATH.findall(page.read_text()) if not (REPO / m).exists()})
    assert missing == [], f"{page.relative_to(REPO)} names files that are not here: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken: list[str] = []
    for target in relative_links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / unquote(file)).resolve() if file else page
        if not dest.exists():
            broken.append(
                f"{target}: no {dest.relative_to(REPO) if REPO in dest.parents else dest}"
            )
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert broken == [], f"{page.relative_to(REPO)}: {broken}"


def test_the_docs_pages_link_to_each_other() -> None:
    """The check above only means something if there are links to check."""
    assert len(relative_links(README)) >= 15
    assert sum(len(relative_links(p)) for p in PAGES[1:]) >= 15


def test_the_readme_is_a_front_door() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Render: every file, before it is installed", "render-every-file-before-it-is-installed"),
        ("`serve up`", "serve-up"),
        ("Which NCCL, which GPUs, which transport", "which-nccl-which-gpus-which-transport"),
        (
            "Host keys are checked everywhere, and a changed one stops the run",
            "host-keys-are-checked-everywhere-and-a-changed-one-stops-the-run",
        ),
        ("Bugs & fixes (v0.5.17)", "bugs--fixes-v0517"),
        ("snake_case names", "snake_case-names"),
    ],
)
def test_slugs_are_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor
