"""Errors Ansible prints outside any task reach the user, and inventory text in
messages is printed as it is (not eaten as rich markup)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkctl.cli import cli, main
from sparkctl.runner import ansible_errors

YAML_ERROR = (
    (
        "\x1b[0;31m[ERROR]: YAML parsing failed: Colons in unquoted values must be "
        "followed by a non-space character.\x1b[0m\n"
    )
    + """\
Origin: /home/ops/sparkctl/roles/nvidia_driver/tasks/verify.yml:64:91

62   ansible.builtin.package_facts:
"""
)


def test_yaml_error_is_found_with_its_origin() -> None:
    errors = ansible_errors("PLAY [x]\n" + YAML_ERROR)
    assert errors == [
        "YAML parsing failed: Colons in unquoted values must be followed by a "
        "non-space character. | Origin: /home/ops/sparkctl/roles/nvidia_driver/tasks/"
        "verify.yml:64:91"
    ]


def test_old_style_errors_and_no_errors() -> None:
    assert ansible_errors("ERROR! the role 'x' was not found\n\nok") == [
        "the role 'x' was not found"
    ]
    assert ansible_errors("PLAY RECAP\nspark1 : ok=3\n") == []


def test_error_messages_keep_square_brackets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = tmp_path / "empty.ini"
    inv.write_text("[sparks]\n")
    argv = sys.argv
    sys.argv = ["sparkctl", "inventory", "check", str(inv)]
    try:
        try:
            main()
        except SystemExit as exc:
            code = exc.code
        else:
            code = 0
    finally:
        sys.argv = argv
    err = capsys.readouterr().err
    assert code == 2
    assert "no hosts in group [sparks]" in err
    assert "under a [sparks] section" in err


def test_cli_is_importable() -> None:
    assert CliRunner().invoke(cli, ["--help"]).exit_code == 0


def test_secret_environment_values_are_blanked_in_the_command_artifact(tmp_path: Path) -> None:
    from sparkctl.runner import REDACTED, redact_command_file  # noqa: PLC0415

    command = tmp_path / "command"
    command.write_text(
        json.dumps(
            {
                "command": ["ansible-playbook", "site.yml"],
                "cwd": "/",
                "env": {
                    "HF_TOKEN": "hf_sentinel",
                    "SPARKCTL_SGLANG_API_KEY": "k" * 20,
                    "AWS_SECRET_ACCESS_KEY": "s",
                    "PATH": "/usr/bin",
                    "EMPTY_TOKEN": "",
                },
            }
        )
    )
    assert redact_command_file(tmp_path)
    env = json.loads(command.read_text())["env"]
    assert env == {
        "HF_TOKEN": REDACTED,
        "SPARKCTL_SGLANG_API_KEY": REDACTED,
        "AWS_SECRET_ACCESS_KEY": REDACTED,
        "PATH": "/usr/bin",
        "EMPTY_TOKEN": "",
    }
    assert "hf_sentinel" not in command.read_text()
    assert not redact_command_file(tmp_path / "absent")


def test_secret_extra_vars_stay_off_the_command_line_and_out_of_the_artifacts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real (controller-only) playbook run with -e secrets: the inline -e still works,
    the secret-named one reaches Ansible through a 0600 file that is gone afterwards."""
    from sparkctl import inventory  # noqa: PLC0415
    from sparkctl.remote import load_plan  # noqa: PLC0415

    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    sentinel = "sentinel-KEY-7f3a9c21d4e8b6a0"
    key_file = tmp_path / "keys" / "secret-named-path"
    inv = inventory.validate(Path(__file__).resolve().parents[2] / "inventory" / "sim.ini")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    plan = load_plan(
        inv,
        run_dir,
        {"sglang_api_key": sentinel, "sglang_api_key_file": str(key_file), "sglang_port": 31000},
    )
    sglang = plan.node("spark1").sglang
    assert sglang.port == 31000  # inline -e
    assert sglang.api_key_file == str(key_file)  # -e @file (secret-named)
    command = json.loads((run_dir / "plan" / "artifacts" / "run" / "command").read_text())
    assert any(str(a).startswith("@") for a in command["command"]), command["command"]
    assert not list((run_dir / "plan" / "runner").glob("secret-vars-*"))
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert sentinel.encode() not in path.read_bytes(), path


def test_an_unreachable_host_is_named_and_the_message_says_what_changed(tmp_path: Path) -> None:
    from sparkctl.playbook import failure_message  # noqa: PLC0415
    from sparkctl.runner import HostStats, RunResult, TaskFailure  # noqa: PLC0415

    stopped = RunResult(
        "failed",
        4,
        tmp_path,
        3.0,
        stats={"spark1": HostStats(ok=1), "spark3": HostStats(unreachable=1)},
        failures=[
            TaskFailure(
                "spark3",
                "Every host answers over SSH",
                "ssh: connect to host 10.77.0.13 port 22: Connection refused",
                unreachable=True,
            )
        ],
    )
    assert RunResult.exit_code(stopped).name == "UNREACHABLE"
    msg = failure_message(stopped, "provision")
    assert msg.startswith(
        "provision stopped for the whole cluster: spark3 did not answer "
        "over SSH; no host was changed"
    ), msg
    stopped.stats["spark1"].changed = 2
    assert "changed before it stopped: spark1" in failure_message(stopped, "provision")
    failed = RunResult(
        "failed",
        2,
        tmp_path,
        3.0,
        stats={"spark2": HostStats(failed=1)},
        failures=[TaskFailure("spark2", "t", "boom")],
    )
    assert failure_message(failed, "model sync").startswith("model sync failed on spark2 (")


HOST_KEY_CHANGED = """\
Failed to connect to the host via ssh: @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
The fingerprint for the ED25519 key sent by the remote host is
SHA256:rNb80ne+K9YHJPFCKz4eoBKnNKUZeVpzRTSqrxPHGHA.
Offending ED25519 key in /root/.local/state/lab/sparkctl_lab/ssh/known_hosts:2
Host key for 10.77.0.12 has changed and you have requested strict checking.
Host key verification failed."""


def test_a_changed_host_key_is_named_with_the_trust_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unreachable host whose key ssh refused: the failure says so and gives the
    `sparkctl trust` commands (with the inventory as given); other failures keep theirs."""
    import types  # noqa: PLC0415

    import ansible_runner  # noqa: PLC0415

    from sparkctl.runner import Event, host_key_message, run_playbook  # noqa: PLC0415

    inv = Path("inventory/sim.ini")
    assert host_key_message(
        "spark3", "ssh: connect to host 10.77.0.13 port 22: Connection refused", inv
    ).startswith("ssh: connect")
    unknown = host_key_message(
        "spark3",
        "No ED25519 host key is known for 10.77.0.13 and you "
        "have requested strict checking.\r\nHost key verification "
        "failed.",
        inv,
    )
    assert (
        unknown.startswith("spark3 has no recorded SSH host key")
        and "`sparkctl trust inventory/sim.ini`" in unknown
        and "--accept" not in unknown
    )

    def fake_run(**kwargs: object) -> object:
        handler = kwargs["event_handler"]
        assert callable(handler)
        for host, msg in (
            ("spark2", HOST_KEY_CHANGED),
            ("spark4", "Host key verification failed."),
        ):
            handler(
                {
                    "event": "runner_on_unreachable",
                    "event_data": {
                        "host": host,
                        "task": "Gathering Facts",
                        "res": {"msg": msg, "unreachable": True},
                    },
                }
            )
        handler(
            {
                "event": "runner_on_unreachable",
                "event_data": {
                    "host": "spark3",
                    "task": "Gathering Facts",
                    "res": {"msg": "Connection timed out", "unreachable": True},
                },
            }
        )
        # A task's own ssh (node to node) failing is not the controller's host key.
        handler(
            {
                "event": "runner_on_failed",
                "event_data": {
                    "host": "spark1",
                    "task": "relay",
                    "res": {"msg": "Host key verification failed."},
                },
            }
        )
        return types.SimpleNamespace(
            status="failed",
            rc=4,
            stats={"dark": {"spark2": 1}},
            config=types.SimpleNamespace(artifact_dir=str(tmp_path)),
        )

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    seen: list[Event] = []
    result = run_playbook(
        "site.yml", inv, results_dir=tmp_path / "r", hosts=1, on_event=seen.append
    )
    by_host = {f.host: f.message for f in result.failures}
    for host in ("spark2", "spark4"):
        msg = by_host[host]
        assert msg.startswith(f"{host}'s SSH host key does not match the one recorded"), msg
        assert "`sparkctl trust inventory/sim.ini`" in msg
        assert f"`sparkctl trust inventory/sim.ini --accept {host}`" in msg
    assert by_host["spark3"] == "Connection timed out"
    assert by_host["spark1"] == "Host key verification failed."
    assert next(e for e in seen if e.host == "spark2").message == by_host["spark2"]
    assert result.exit_code().name == "UNREACHABLE"


def test_forks_follow_the_hosts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One fork per host of the inventory (ansible.cfg's 16 would run 32 nodes in two
    batches), at most FORKS_MAX, and an operator's ANSIBLE_FORKS is left to decide."""
    import types  # noqa: PLC0415

    import ansible_runner  # noqa: PLC0415
    from ansible_runner.config.runner import RunnerConfig  # noqa: PLC0415

    from sparkctl.runner import FORKS_MAX, run_playbook  # noqa: PLC0415

    asked: list[object] = []

    def fake_run(**kwargs: object) -> object:
        asked.append(kwargs["forks"])
        return types.SimpleNamespace(
            status="successful",
            rc=0,
            stats={},
            config=types.SimpleNamespace(artifact_dir=str(tmp_path)),
        )

    monkeypatch.setattr(ansible_runner, "run", fake_run)
    monkeypatch.delenv("ANSIBLE_FORKS", raising=False)
    for hosts in (5, 9, 33, FORKS_MAX + 40):
        run_playbook("site.yml", Path("inventory/sim.ini"), results_dir=tmp_path / "r", hosts=hosts)
    monkeypatch.setenv("ANSIBLE_FORKS", "3")
    run_playbook("site.yml", Path("inventory/sim.ini"), results_dir=tmp_path / "r", hosts=33)
    assert asked == [5, 9, 33, FORKS_MAX, None]
    # ansible-runner itself turns the number into ansible-playbook's --forks.
    config = RunnerConfig(private_data_dir=str(tmp_path / "p"), playbook="site.yml", forks=33)
    argv = config.generate_ansible_command()
    assert argv[argv.index("--forks") + 1] == "33"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("sglang_env_extra", {"HF_TOKEN": "nested-sentinel-5b2e"}),
        ("deep", {"a": [{"b": {"sglang_api_key": "nested-sentinel-5b2e"}}]}),
        ("sglang_extra_args", ["--served-model-name", "hf_nestedSentinel5b2e0123456789abcdefgh"]),
        ("model_cache_hf_endpoint", "https://u:nested-sentinel-5b2e@hub.example/"),
    ],
)
def test_nested_secret_extra_vars_go_to_the_private_file_not_argv(
    tmp_path: Path, name: str, value: object
) -> None:
    """A secret under a secret-named key at any depth (or a token's shape) of an extra
    var: the whole variable goes to the 0600 file, never onto ansible-playbook's argv as
    ansible-runner's own RunnerConfig builds it; the rest stays inline."""
    import stat  # noqa: PLC0415

    from ansible_runner.config.runner import RunnerConfig  # noqa: PLC0415

    from sparkctl.runner import _split_secret_vars  # noqa: PLC0415

    secret = "nested-sentinel-5b2e" if "nested-sentinel" in json.dumps(value) else "Sentinel5b2e"
    inline, path = _split_secret_vars({name: value, "sglang_port": 31000}, tmp_path)
    assert inline == {"sglang_port": 31000}
    assert path is not None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {name: value}
    config = RunnerConfig(
        private_data_dir=str(tmp_path / "p"),
        playbook="site.yml",
        extravars=inline,
        cmdline=f"-e @{path}",
    )
    argv = config.generate_ansible_command()
    assert secret not in " ".join(argv), argv
    assert "31000" in " ".join(argv)
    assert f"@{path}" in " ".join(argv)
