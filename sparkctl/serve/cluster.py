"""What `sparkctl serve` needs to reach the service: the plan, SSH, the endpoint, the key.

Everything comes from the inventory through the same plan `validate` uses
(``playbooks/validate_plan.yml``, the sglang role's ``tasks/plan.yml``) and the
same per-run ssh_config (one ControlMaster per node). The API key is read on
the controller from ``SPARKCTL_SGLANG_API_KEY`` or the file provision generated
(``sglang_api_key_file``); it is never written into the plan, a report or a log.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkctl import inventory
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.provision import results_dir
from sparkctl.validate import nccl, sshconfig
from sparkctl.validate.run import load_plan

API_KEY_ENV = "SPARKCTL_SGLANG_API_KEY"


@dataclass
class Cluster:
    inv: inventory.Inventory
    plan: dict[str, Any]
    run_dir: Path
    ssh_config: Path
    runner: nccl.Runner

    @property
    def nodes(self) -> list[str]:
        """Every node, in rank order (rank 0, the head, first)."""
        return [n.name for n in self.inv.nodes]

    @property
    def head(self) -> str:
        return self.nodes[0]

    @property
    def workers(self) -> list[str]:
        return self.nodes[1:]

    def sglang(self, node: str | None = None) -> dict[str, Any]:
        return dict(self.plan["hosts"][node or self.head]["sglang"])

    def rank(self, node: str) -> int:
        return int(self.plan["hosts"][node]["node_rank"])

    @property
    def unit(self) -> str:
        return str(self.sglang()["unit"])

    @property
    def base_url(self) -> str:
        """The API as the controller reaches it: the head's management address."""
        return f"http://{self.inv.node(self.head).mgmt_ip}:{int(self.sglang()['port'])}"

    @property
    def model_name(self) -> str:
        s = self.sglang()
        return str(s["served_model_name"] or s["model_path"])

    def sudo(self, node: str) -> str:
        """Root on the node: the connection user may be an admin with sudo (become)."""
        user = str(self.inv.hostvars[node].get("ansible_user") or "root")
        return "" if user == "root" else "sudo -n "

    def run(self, node: str, command: str, timeout: int = 60) -> tuple[int, str]:
        return self.runner(node, command, timeout)

    def each(self, nodes: Sequence[str], command: str,
             timeout: int = 60) -> dict[str, tuple[int, str]]:
        """The same command on every node at once."""
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            futures = {n: pool.submit(self.runner, n, command, timeout) for n in nodes}
            return {n: f.result() for n, f in futures.items()}

    def unit_states(self, nodes: Sequence[str] | None = None) -> dict[str, dict[str, str]]:
        props = "ActiveState,SubState,Result,NRestarts,ActiveEnterTimestamp,MainPID"
        out = self.each(nodes or self.nodes, f"systemctl show -p {props} {self.unit}", 30)
        states = {}
        for node, (rc, text) in out.items():
            values = dict(line.partition("=")[::2] for line in text.splitlines() if "=" in line)
            if rc != 0 or "ActiveState" not in values:
                values = {"ActiveState": "unknown", "SubState": "unreachable",
                          "error": text.strip().splitlines()[-1] if text.strip() else f"rc {rc}"}
            states[node] = values
        return states

    def api_key(self) -> str | None:
        """SPARKCTL_SGLANG_API_KEY, else the controller's key file; None when not required."""
        if os.environ.get(API_KEY_ENV):
            return os.environ[API_KEY_ENV]
        s = self.sglang()
        path = Path(str(s["api_key_file"])).expanduser()
        try:
            key = path.read_text().strip()
        except FileNotFoundError:
            if s["api_key_required"]:
                raise SparkctlError(
                    f"no API key: {API_KEY_ENV} is not set and {path} does not exist",
                    ExitCode.BAD_INPUT,
                    hint="provision writes it (role sglang); or export the key") from None
            return None
        except OSError as exc:
            raise SparkctlError(f"{path}: cannot read the API key: {exc.strerror}",
                                ExitCode.ENVIRONMENT) from None
        # ansible's password lookup may append " salt=..." to the file.
        return key.split()[0] if key else None


def open_cluster(inventory_path: Path, command: str,
                 extravars: Mapping[str, Any] | None = None) -> Cluster:
    """Inventory checked (exit 2, nothing contacted), plan loaded, ssh_config written."""
    inv = inventory.validate(inventory_path)
    run_dir = results_dir(inv.cluster, command)
    run_dir.mkdir(parents=True)
    plan = load_plan(inv, run_dir, extravars)
    nodes = [n.name for n in inv.nodes]
    cfg = sshconfig.write(run_dir / "ssh_config", inv.hostvars, nodes)
    return Cluster(inv=inv, plan=plan, run_dir=run_dir, ssh_config=cfg,
                   runner=nccl.ssh_runner(cfg))
