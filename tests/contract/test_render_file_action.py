"""cluster_defaults' ``sparkctl_render_file`` action: render's files, written by the controller.

The roles' tasks/render.yml write every file with it instead of
ansible.builtin.template/copy/file (whose modules cost seconds per file and
host). What it must keep: the bytes ansible.builtin.template and copy write
(checked here against them, through the real ansible-playbook, on localhost),
the mode given whatever the umask, parents created, and no write outside
``sparkctl_render_dir``. The writing functions are loaded from the plugin file.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.pathload import ansible_playbook, load_file

REPO = Path(__file__).resolve().parents[2]
ACTION = load_file(
    "sparkctl_render_file_action",
    REPO
    / "ansible_collections"
    / "sparkctl"
    / "spark"
    / "plugins"
    / "action"
    / "sparkctl_render_file.py",
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask() -> Iterator[None]:
    """Restores the process umask a test changes."""
    old = os.umask(0o022)
    os.umask(old)
    yield
    os.umask(old)


# ------------------------------------------------------------ through ansible-playbook
# A template with what the roles' templates use (ansible_managed, loops under
# trim_blocks, an include from templates/, non-ASCII text, a trailing blank
# line), one that is a single expression (native templating returns a dict),
# and copy content as text and as a dict.
TEMPLATES = {
    "full.j2": textwrap.dedent("""\
        # {{ ansible_managed }}
        # {{ template_path | basename }} -> {{ template_destpath | basename }}
        {% for name in names %}
        {{ name }}={{ loop.index }}
        {% endfor %}
          {% if names %}indented block{% endif %}
        {% include 'part.j2' %}
        Grüße — {{ names | length }}

        """),
    "part.j2": "included {{ names[0] }}\n",
    "native.j2": "{{ {'mtu': 9000, 'ports': names} }}",
}

TASKS = textwrap.dedent("""\
    - name: Reference files by ansible.builtin.template and copy
      ansible.builtin.template:
        src: "{{ item }}"
        dest: "{{ ref }}/{{ item }}.out"
        mode: "0640"
      loop: [full.j2, native.j2]
    - name: Reference content
      ansible.builtin.copy:
        content: "{{ item.content }}"
        dest: "{{ ref }}/{{ item.name }}"
        mode: "0600"
      loop: "{{ contents }}"
    - name: The same by sparkctl_render_file
      sparkctl.spark.sparkctl_render_file:
        src: "{{ item }}"
        dest: "{{ sparkctl_render_dir }}/host/{{ item }}.out"
        mode: "0640"
      loop: [full.j2, native.j2]
    - name: The same content by sparkctl_render_file
      sparkctl.spark.sparkctl_render_file:
        content: "{{ item.content }}"
        dest: "{{ sparkctl_render_dir }}/host/{{ item.name }}"
        mode: "0600"
      loop: "{{ contents }}"
    - name: A dest outside the render directory
      sparkctl.spark.sparkctl_render_file:
        content: never written
        dest: "{{ ref }}/../outside.txt"
        mode: "0644"
    """)

VARS = textwrap.dedent("""\
    names: [alpha, beta]
    contents:
      - {name: text.txt, content: "a line\\nand another\\n"}
      - {name: dict.json, content: {mtu: 9000, ports: [swp1, swp2]}}
    """)


@pytest.fixture(scope="module")
def played(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One run of a throwaway role (depending on cluster_defaults, as every sparkctl role
    does) that writes each file both ways; returns the run's directory and process."""
    base = tmp_path_factory.mktemp("render-action")
    role = base / "roles" / "probe"
    for sub in ("tasks", "templates", "meta", "defaults"):
        (role / sub).mkdir(parents=True)
    for name, text in TEMPLATES.items():
        (role / "templates" / name).write_text(text)
    (role / "tasks" / "main.yml").write_text(TASKS)
    (role / "defaults" / "main.yml").write_text(VARS)
    (role / "meta" / "main.yml").write_text(
        "dependencies:\n  - role: sparkctl.spark.cluster_defaults\n"
    )
    (base / "play.yml").write_text(
        textwrap.dedent("""\
        - name: Probe
          hosts: localhost
          gather_facts: false
          roles: [probe]
        """)
    )
    (base / "ref").mkdir()
    (base / "render").mkdir()
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_ROLES_PATH": str(base / "roles"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(base / "facts"),
        "ANSIBLE_LOCAL_TEMP": str(base / "ansible-tmp"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    }
    proc = subprocess.run(
        [
            str(ansible_playbook()),
            "-i",
            "localhost,",
            "-c",
            "local",
            str(base / "play.yml"),
            "-e",
            f"ref={base / 'ref'} sparkctl_render_dir={base / 'render'}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    return base, proc


def test_files_are_the_bytes_and_modes_template_and_copy_write(
    played: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    base, proc = played
    ours = base / "render" / "host"
    names = ["full.j2.out", "native.j2.out", "text.txt", "dict.json"]
    assert sorted(p.name for p in ours.iterdir()) == sorted(names), proc.stdout[-3000:]
    for name in names:
        ref = base / "ref" / name
        assert (ours / name).read_bytes() == ref.read_bytes(), name
        assert _mode(ours / name) == _mode(ref), name
    # What the comparison covers: the loop, the include and the managed line were rendered.
    full = (ours / "full.j2.out").read_text()
    assert "alpha=1\nbeta=2\n" in full and "included alpha" in full, full
    assert full.startswith("# Ansible managed\n# full.j2 -> full.j2.out\n"), full
    # Parents of a file are made, 0755.
    assert _mode(ours) == 0o755


def test_a_dest_outside_the_render_dir_fails_the_task_and_writes_nothing(
    played: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    base, proc = played
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "TASK [probe : A dest outside the render directory]" in proc.stdout
    assert "is outside sparkctl_render_dir" in proc.stdout, proc.stdout[-3000:]
    assert "failed=1" in proc.stdout
    assert not (base / "outside.txt").exists()


# ------------------------------------------------------------------ the plain functions
@pytest.mark.parametrize(
    "dest", ["/etc/nccl.conf", "{root}", "{root}/../x", "relative/x", "{root}/link/escaped"]
)
def test_inside_refuses_what_is_not_strictly_under_the_root(tmp_path: Path, dest: str) -> None:
    root = tmp_path / "render"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ACTION.RenderError):
        ACTION.inside(str(root), dest.format(root=root))


def test_inside_accepts_a_path_under_the_root_and_needs_a_root(tmp_path: Path) -> None:
    dest = f"{tmp_path}/spark1/etc/nccl.conf"
    assert ACTION.inside(str(tmp_path), dest) == Path(dest)
    with pytest.raises(ACTION.RenderError, match="sparkctl_render_dir is not set"):
        ACTION.inside("", dest)


@pytest.mark.parametrize("mode", [420, "644x", "u=rw", "01777", None])
def test_a_mode_must_be_an_octal_string(mode: object) -> None:
    with pytest.raises(ACTION.RenderError, match="octal string"):
        ACTION.parse_mode(mode)


def test_mode_strings() -> None:
    assert ACTION.parse_mode("0644") == 0o644
    assert ACTION.parse_mode("600") == 0o600


@pytest.mark.usefixtures("umask")
@pytest.mark.parametrize(("umask_value", "mode"), [(0o077, 0o644), (0o000, 0o600)])
def test_the_mode_given_whatever_the_umask_and_parents_made_0755(
    tmp_path: Path, umask_value: int, mode: int
) -> None:
    os.umask(umask_value)
    path = tmp_path / "spark1" / "etc" / "sparkctl" / "nccl.env"
    assert ACTION.write_file(path, b"NCCL_DEBUG=WARN\n", mode) is True
    assert path.read_bytes() == b"NCCL_DEBUG=WARN\n"
    assert _mode(path) == mode
    for parent in (tmp_path / "spark1", tmp_path / "spark1" / "etc", path.parent):
        assert _mode(parent) == 0o755, parent
    assert sorted(p.name for p in path.parent.iterdir()) == ["nccl.env"]  # no temporary left


def test_only_what_differs_is_written(tmp_path: Path) -> None:
    path = tmp_path / "unit.service"
    assert ACTION.write_file(path, b"[Unit]\n", 0o644) is True
    inode = path.stat().st_ino
    assert ACTION.write_file(path, b"[Unit]\n", 0o644) is False
    assert path.stat().st_ino == inode
    path.chmod(0o666)
    assert ACTION.write_file(path, b"[Unit]\n", 0o644) is True
    assert _mode(path) == 0o644 and path.stat().st_ino == inode
    assert ACTION.write_file(path, b"[Service]\n", 0o644) is True
    assert path.read_bytes() == b"[Service]\n"


def test_check_mode_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b.conf"
    assert ACTION.write_file(path, b"x\n", 0o644, check=True) is True
    assert ACTION.make_directory(tmp_path / "c", 0o755, check=True) is True
    assert sorted(tmp_path.iterdir()) == []


def test_refuses_to_write_over_a_directory_or_a_link(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    for name in ("dir", "link"):
        with pytest.raises(ACTION.RenderError, match="not a regular file"):
            ACTION.write_file(tmp_path / name, b"x", 0o644)


@pytest.mark.usefixtures("umask")
def test_a_directory_and_each_parent_it_makes_get_the_mode(tmp_path: Path) -> None:
    os.umask(0o077)
    path = tmp_path / "spark1" / "etc" / "chrony" / "conf.d"
    assert ACTION.make_directory(path, 0o755) is True
    for made in (tmp_path / "spark1", tmp_path / "spark1" / "etc", path.parent, path):
        assert _mode(made) == 0o755, made
    assert ACTION.make_directory(path, 0o755) is False
    path.chmod(0o700)
    assert ACTION.make_directory(path, 0o755) is True
    assert _mode(path) == 0o755
    (tmp_path / "file").write_text("")
    with pytest.raises(ACTION.RenderError, match="not a directory"):
        ACTION.make_directory(tmp_path / "file" / "sub", 0o755)


def test_content_as_copy_writes_it() -> None:
    assert ACTION.content_bytes("Grüße\n") == "Grüße\n".encode()
    assert ACTION.content_bytes({"mtu": 9000}) == b'{"mtu": 9000}'
    assert ACTION.content_bytes([1, 2]) == b"[1, 2]"
    assert ACTION.content_bytes(9000) == b"9000"
