"""The collection's filters are loaded once, in the controller's process.

ansible-core loads every filter file of a collection whenever a template names one of
its filters, compiling each from source, and a task's template runs in a worker forked
per task and host. playbooks/preflight.yml, the first play of every entry playbook,
names its hosts with ``sparkctl.spark.sparkctl_play_hosts``, templated in the
controller's process: from then on every forked worker inherits the loaded filters
(plugins/filter/sparkctl_play_hosts.py). Held here with the real ansible-playbook: a
worker of a later play looks into its own ``sys.modules`` through a filter of the test's
own (a playbook-adjacent ``filter_plugins/``, whose lookup loads nothing of the
collection), before any template of that worker names a collection filter.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.unit.pathload import ansible_playbook, load_file

REPO = Path(__file__).resolve().parents[2]
FILTERS = REPO / "ansible_collections" / "sparkctl" / "spark" / "plugins" / "filter"
PREFIX = "ansible_collections.sparkctl.spark.plugins.filter."
PLAY_HOSTS = load_file("sparkctl_play_hosts_filter", FILTERS / "sparkctl_play_hosts.py")

LOOKER = textwrap.dedent(f"""\
    import json
    import os
    import sys


    def loaded_sparkctl_filters(value):
        names = sorted(m for m in sys.modules if m.startswith({PREFIX!r}))
        with open(os.environ["LOOKER_OUT"], "w") as out:
            json.dump(names, out)
        return value


    class FilterModule:
        def filters(self):
            return {{"loaded_sparkctl_filters": loaded_sparkctl_filters}}
    """)


def _worker_modules(tmp_path: Path, preflight: Path) -> list[str]:
    (tmp_path / "filter_plugins").mkdir()
    (tmp_path / "filter_plugins" / "looker.py").write_text(LOOKER)
    # The controller's variables (connection.yml) sit beside the playbook, as in playbooks/.
    (tmp_path / "group_vars").symlink_to(REPO / "playbooks" / "group_vars")
    (tmp_path / "play.yml").write_text(
        textwrap.dedent(f"""\
            - name: Preflight
              ansible.builtin.import_playbook: {preflight}

            - name: A later play
              hosts: spark1
              gather_facts: false
              tasks:
                - name: What this worker holds before it names a filter of the collection
                  ansible.builtin.debug:
                    msg: "{{{{ 0 | loaded_sparkctl_filters }}}}"
            """)
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO),
        "LOOKER_OUT": str(tmp_path / "worker-modules.json"),
    }
    proc = subprocess.run(
        [str(ansible_playbook()), "-i", str(REPO / "inventory" / "sim.ini"), "play.yml"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    names: list[str] = json.loads((tmp_path / "worker-modules.json").read_text())
    return names


def test_a_forked_worker_inherits_every_filter_of_the_collection(tmp_path: Path) -> None:
    expected = sorted(PREFIX + p.stem for p in FILTERS.glob("*.py") if p.stem != "__init__")
    assert _worker_modules(tmp_path, REPO / "playbooks" / "preflight.yml") == expected


def test_without_the_filter_in_hosts_a_worker_holds_none_of_them(tmp_path: Path) -> None:
    """The same play with the preflight's hosts written plainly: the check above can fail."""
    plain = tmp_path / "preflight-plain.yml"
    text = (REPO / "playbooks" / "preflight.yml").read_text()
    line = "  hosts: \"{{ groups | sparkctl.spark.sparkctl_play_hosts('sparks', 'switches') }}\"\n"
    assert line in text
    plain.write_text(text.replace(line, "  hosts: sparks:switches\n"))
    assert _worker_modules(tmp_path, plain) == []


@pytest.mark.parametrize(
    ("groups", "names", "pattern"),
    [
        ({"sparks": [], "switches": []}, ("sparks", "switches"), "sparks:switches"),
        ({"sparks": []}, ("sparks", "switches"), "sparks"),
        ({"sparks": [], "monitoring": []}, ("sparks", "monitoring"), "sparks:monitoring"),
        ({"ungrouped": []}, ("sparks", "monitoring"), "sparks"),
    ],
)
def test_the_pattern_names_the_groups_the_inventory_has(
    groups: dict[str, list[str]], names: tuple[str, ...], pattern: str
) -> None:
    assert PLAY_HOSTS.sparkctl_play_hosts(groups, *names) == pattern


@pytest.mark.parametrize("names", [(), ("sparks:all",), ("sparks", "!switches"), (3,)])
def test_what_is_not_a_group_name_is_refused(names: tuple[Any, ...]) -> None:
    from ansible.errors import AnsibleFilterError  # noqa: PLC0415

    with pytest.raises(AnsibleFilterError):
        PLAY_HOSTS.sparkctl_play_hosts({"sparks": []}, *names)
