"""render.yml's plays run inline (playbooks/strategy_plugins/sparkctl_inline.py): the
same files as Ansible's own linear strategy, byte for byte and mode for mode.

``sparkctl render`` runs its tasks (the preflight play's too) in the controller's
process instead of one forked worker per task and host, reads the executor's
results without the results thread's pipe, and keeps Jinja's compiled code
for a source it has compiled before. The session's renders (tests/conftest.py,
inline) are compared here with renders of the same inventories in the same
environment with ``-e sparkctl_render_strategy=linear``, which is Ansible
unchanged, and with ``-e sparkctl_render_compile_cache=false``, the inline
strategy compiling every template anew as Ansible does. The compile cache's
key and its checks are tested on their own below.
"""

from __future__ import annotations

import marshal
import stat
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sparkctl.provision import cluster_env
from sparkctl.runner import run_playbook
from tests.conftest import RENDER_API_KEYS, REPO, Rendered
from tests.unit.pathload import load_file

STRATEGY = REPO / "playbooks" / "strategy_plugins" / "sparkctl_inline.py"
# How each comparison render differs from the session's (inline, compile cache on).
VARIANTS: dict[str, dict[str, object]] = {
    "linear": {"sparkctl_render_strategy": "linear"},
    "no-compile-cache": {"sparkctl_render_compile_cache": False},
}


def _tree(root: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(root)): (
            stat.S_IMODE(p.stat().st_mode),
            p.read_bytes() if p.is_file() else b"",
        )
        for p in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", ["sim", "lab"])
def test_inline_render_is_the_same_render(
    name: str,
    variant: str,
    rendered_inventory: Callable[[str], Rendered],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inline = rendered_inventory(name)
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    key = RENDER_API_KEYS[name]
    if key is None:
        monkeypatch.delenv("SPARKCTL_SGLANG_API_KEY", raising=False)
    else:
        monkeypatch.setenv("SPARKCTL_SGLANG_API_KEY", key)
    out = tmp_path / "out"
    out.mkdir()
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "AnsibleCollectionFinder has already been configured", UserWarning
        )
        result = run_playbook(
            "render.yml",
            REPO / "inventory" / f"{name}.ini",
            results_dir=tmp_path / "runs",
            hosts=len(inline.inv.hostvars),
            extravars={"sparkctl_render_dir": str(out), **VARIANTS[variant]},
            envvars=cluster_env(inline.inv.cluster),
        )
    assert result.ok, result.failures
    theirs, ours = _tree(out), _tree(inline.out)
    assert sorted(theirs) == sorted(ours)
    assert theirs == ours
    assert len([k for k, (_, data) in ours.items() if data]) >= 50  # files, not only dirs
    stdout = (result.artifact_dir / "stdout").read_text()
    # Which strategy ran the preflight play: Ansible warns when it loads sparkctl_inline.
    assert ("strategy plugins not included in ansible.builtin" in stdout) == (
        variant != "linear"
    ), stdout[-2000:]


# The compile cache on its own: the strategy plugin's module, loaded from its file.


@pytest.fixture(scope="module")
def strategy() -> ModuleType:
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "AnsibleCollectionFinder has already been configured", UserWarning
        )
        from ansible.plugins.loader import init_plugin_loader  # noqa: PLC0415

        init_plugin_loader()
    return load_file("sparkctl_inline_strategy", STRATEGY)


@pytest.fixture
def cache(strategy: ModuleType) -> Iterator[Any]:
    own = strategy._CompileCache()
    own.install()
    try:
        yield own
    finally:
        own.uninstall()


def _env() -> Any:
    from ansible._internal._templating._jinja_bits import AnsibleEnvironment  # noqa: PLC0415

    return AnsibleEnvironment()


def _templar(**variables: Any) -> Any:
    from ansible.template import Templar  # noqa: PLC0415

    return Templar(variables=variables)


def _render(source: str, **variables: Any) -> Any:
    """``source`` through Ansible's own templating, in a templar (and environment) of its own."""
    from ansible.template import trust_as_template  # noqa: PLC0415

    return _templar(**variables).template(trust_as_template(source))


def test_one_code_for_two_environments_each_its_own_template(cache: Any) -> None:
    source = "{{ a }}-{% if b %}{{ b | upper }}{% endif %}"
    first, second = _env(), _env()
    one, two = first.from_string(source), second.from_string(source)
    assert (cache.hits, len(cache.compiled)) == (1, 1)
    assert one is not two
    assert one.environment is first and two.environment is second
    assert _render(source, a=1, b="x") == "1-X"
    assert _render(source, a=2, b="y") == "2-Y"
    # Ansible compiles it with backslashes escaped (TemplateOptions.escape_backslashes):
    # another key, compiled once, then found.
    assert (cache.hits, len(cache.compiled)) == (2, 2)


def test_what_the_code_is_made_from_is_the_key(cache: Any) -> None:
    from ansible._internal._templating._jinja_bits import (  # noqa: PLC0415
        _TemplateCompileContext,
    )

    env = _env()
    source = "{{ 'a\\\\b' }}\n{% if x %}\ny{% endif %}\nz\n"
    codes = [
        env.compile(source),
        env.compile(source),
        env.overlay(trim_blocks=False).compile(source),  # a code generation setting
        env.overlay(variable_start_string="[[", variable_end_string="]]").compile(source),
    ]
    with _TemplateCompileContext(escape_backslashes=True):  # AnsibleLexer escapes
        codes.append(env.compile(source))
    with _TemplateCompileContext(escape_backslashes=False):
        codes.append(env.compile(source))
    assert cache.hits == 2 and len(cache.compiled) == 4
    assert codes[0] is codes[1] is codes[5]
    assert len({id(code) for code in codes}) == 4
    # each kept code is the code Jinja makes without the cache
    cache.uninstall()
    fresh = [
        env.compile(source),
        env.compile(source),
        env.overlay(trim_blocks=False).compile(source),
        env.overlay(variable_start_string="[[", variable_end_string="]]").compile(source),
    ]
    with _TemplateCompileContext(escape_backslashes=True):
        fresh.append(env.compile(source))
    with _TemplateCompileContext(escape_backslashes=False):
        fresh.append(env.compile(source))
    assert [marshal.dumps(c) for c in codes] == [marshal.dumps(c) for c in fresh]
    assert len({marshal.dumps(c) for c in fresh}) == 4


def test_a_filter_that_changes_compiles_anew(cache: Any) -> None:
    from jinja2 import pass_context  # noqa: PLC0415

    env = _env()
    env.filters["sparkctl_test_twice"] = lambda v: v * 2
    env.compile("{{ 3 | sparkctl_test_twice }}")
    env.compile("{{ 3 | sparkctl_test_twice }}")
    assert cache.hits == 1
    # the same name, now passed its context: the kept code would call it without
    env.filters["sparkctl_test_twice"] = pass_context(lambda ctx, v: v * 2)
    code = env.compile("{{ 3 | sparkctl_test_twice }}")
    assert cache.hits == 1
    assert env.compile("{{ 3 | sparkctl_test_twice }}") is code and cache.hits == 2


def test_errors_are_jinjas_own_and_not_kept(cache: Any) -> None:
    from jinja2.exceptions import TemplateSyntaxError  # noqa: PLC0415

    env = _env()
    for _ in range(2):
        with pytest.raises(TemplateSyntaxError, match="Expected an expression"):
            env.compile("{{ a }}\n{% if %}")
        with pytest.raises(TemplateSyntaxError, match="No filter named"):
            env.compile("{{ a | sparkctl_no_such_filter }}")
    assert (cache.hits, len(cache.compiled)) == (0, 0)


def test_uninstall_restores_jinjas_compile(strategy: ModuleType) -> None:
    from ansible._internal._templating._jinja_bits import AnsibleEnvironment  # noqa: PLC0415

    before = AnsibleEnvironment.compile
    own = strategy._CompileCache()
    own.install()
    assert AnsibleEnvironment.compile is not before
    own.uninstall()
    assert AnsibleEnvironment.compile is before
