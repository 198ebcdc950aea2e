"""A node cannot speak for the inventory: facts stay under ``ansible_facts``.

With Ansible's default (inject_facts_as_vars on), a module on one node that answers
``ansible_facts: {fabric_a_ip: ..., node_rank: 0}`` overrides that node's inventory
values in ``hostvars`` (facts rank above host vars), for the rest of the run and,
through the fact cache, for later runs: base writes every node's known_hosts from
those hostvars. The project's ansible.cfg turns injection off; this runs the real
ansible-playbook with it, on the controller only (connection local), once with the
project's setting and once with injection forced on, which must show the override
(so the test can fail).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"

SPOOF = textwrap.dedent("""\
    #!/usr/bin/python
    from ansible.module_utils.basic import AnsibleModule

    def main():
        module = AnsibleModule(argument_spec={})
        module.exit_json(changed=False, ansible_facts={
            "fabric_a_ip": "192.168.100.12", "node_rank": 1})

    main()
    """)

PLAY = textwrap.dedent("""\
    - name: A node answers with facts that name another node's address and rank
      hosts: spark1
      gather_facts: false
      tasks:
        - name: Spoof
          spoof:
          when: spoof | default(true)
    - name: What the inventory says, as every later play reads it
      hosts: spark2
      gather_facts: false
      tasks:
        - name: Record
          ansible.builtin.copy:
            dest: "{{ out }}"
            content: "{{ {'fabric_a_ip': hostvars['spark1'].fabric_a_ip,
                          'node_rank': hostvars['spark1'].node_rank} | to_json }}"
            mode: "0644"
    """)


def _run(
    tmp_path: Path, out: Path, *, inject: bool | None, spoof: bool = True
) -> dict[str, object]:
    (tmp_path / "library").mkdir(exist_ok=True)
    (tmp_path / "library" / "spoof.py").write_text(SPOOF)
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "hosts.ini").write_text(
        "spark1 ansible_connection=local fabric_a_ip=192.168.100.11 node_rank=0\n"
        "spark2 ansible_connection=local fabric_a_ip=192.168.100.12 node_rank=1\n"
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_LIBRARY": str(tmp_path / "library"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
    }
    if inject is not None:
        env["ANSIBLE_INJECT_FACT_VARS"] = str(inject)
    proc = subprocess.run(
        [
            str(PLAYBOOK),
            "-i",
            str(tmp_path / "hosts.ini"),
            str(tmp_path / "play.yml"),
            "-e",
            json.dumps({"out": str(out), "spoof": spoof}),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result: dict[str, object] = json.loads(out.read_text())
    return result


@pytest.mark.skipif(not PLAYBOOK.exists(), reason="ansible-playbook is not in the venv")
def test_a_modules_facts_do_not_override_the_inventory(tmp_path: Path) -> None:
    ours = tmp_path / "ours"
    ours.mkdir()
    assert _run(ours, ours / "out.json", inject=None) == {
        "fabric_a_ip": "192.168.100.11",
        "node_rank": 0,
    }
    # Next run, facts cached (gathering = smart, jsonfile): still the inventory's.
    assert _run(ours, ours / "again.json", inject=None, spoof=False) == {
        "fabric_a_ip": "192.168.100.11",
        "node_rank": 0,
    }
    # Ansible's default: the node's answer wins.
    default = tmp_path / "default"
    default.mkdir()
    assert _run(default, default / "out.json", inject=True) == {
        "fabric_a_ip": "192.168.100.12",
        "node_rank": 1,
    }
