"""What `sparkctl serve` needs to reach the service: the plan, SSH, the endpoint, the key.

Everything comes from the inventory through the same plan `validate` uses
(``playbooks/validate_plan.yml``, the sglang role's ``tasks/plan.yml``) and the
same per-run ssh_config (one ControlMaster per node). The API key is read on
the controller from ``SPARKCTL_SGLANG_API_KEY`` or the file provision generated
(``sglang_api_key_file``); it is never written into the plan, a report or a log.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkctl import inventory, remote
from sparkctl.collection import tool_output
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.plan import Plan, SglangPlan
from sparkctl.playbook import results_dir
from sparkctl.runner import REDACTED

if TYPE_CHECKING:
    from sparkctl.serve.gateway import Gateway


def tls_context(ca_file: str | None) -> ssl.SSLContext | bool:
    """What httpx checks the server's certificate with: the inventory's CA, else the system's."""
    return ssl.create_default_context(cafile=ca_file) if ca_file else True


@dataclass
class Cluster:
    inv: inventory.Inventory
    plan: Plan
    run_dir: Path
    ssh_config: Path
    runner: remote.Runner
    extravars: Mapping[str, Any] = field(default_factory=dict, repr=False)
    _secret_values: list[str] | None = field(default=None, repr=False)
    # One TP group's nodes (:meth:`narrowed`); empty: every node.
    only: tuple[str, ...] = field(default=(), repr=False)

    @property
    def nodes(self) -> list[str]:
        """Every node (or the narrowed group's), in node_rank order."""
        every = [n.name for n in self.inv.nodes]
        return [n for n in every if n in self.only] if self.only else every

    def narrowed(self, group: Group) -> Cluster:
        """The cluster as serve up's functions see it, narrowed to ``group``'s nodes: its
        heads, workers, groups and unit states follow from :attr:`nodes`."""
        return replace(self, only=tuple(group.members))

    def groups(self) -> list[Group]:
        """The TP groups (sglang_group), each with its members in rank order, head first.

        One group of every node when the plan predates groups (:meth:`Plan.from_dict`)."""
        seen: dict[str, list[str]] = {}
        for node in self.nodes:
            s = self.plan.node(node).sglang
            seen.setdefault(s.group, list(s.group_members))
        return [Group(self, name, members) for name, members in seen.items()]

    def group_of(self, node: str) -> Group:
        return next(g for g in self.groups() if node in g.members)

    @property
    def heads(self) -> list[str]:
        return [g.head for g in self.groups()]

    @property
    def head(self) -> str:
        """The first group's head (the only one with a single group)."""
        return self.heads[0]

    @property
    def workers(self) -> list[str]:
        heads = set(self.heads)
        return [n for n in self.nodes if n not in heads]

    def sglang(self, node: str | None = None) -> SglangPlan:
        return self.plan.node(node or self.head).sglang

    def rank(self, node: str) -> int:
        """The rank within the node's TP group (SGLang's --node-rank)."""
        return self.group_of(node).rank(node)

    def label(self, node: str) -> str:
        """How a rank is named: `rank 2 (spark3)`, with the group when there are several."""
        groups = self.groups()
        group = f"group {self.group_of(node).name} " if len(groups) > 1 else ""
        return f"{group}rank {self.rank(node)} ({node})"

    @property
    def unit(self) -> str:
        return self.sglang().unit

    @property
    def base_url(self) -> str:
        """The first group's API as the controller reaches it (its head's management address)."""
        return self.groups()[0].base_url

    @property
    def model_name(self) -> str:
        s = self.sglang()
        return s.served_model_name or s.model_path

    def gateway(self) -> Gateway | None:
        """SGLang's gateway in front of the groups (sglang_gateway_enabled), reached at
        its host's management address with the API's key; None without one."""
        from sparkctl.serve.gateway import Gateway  # noqa: PLC0415 - gateway uses probe, probe us

        s = self.sglang()
        if not s.gateway_host:
            return None
        node = self.inv.node(s.gateway_host)
        return Gateway(f"http://{node.mgmt_ip}:{s.gateway_port}", self.api_key())

    def sudo(self, node: str) -> str:
        """Root on the node: the connection user may be an admin with sudo (become)."""
        return remote.sudo_prefix(self.plan, node)

    def run(self, node: str, command: str, timeout: int = 60) -> tuple[int, str]:
        return self.runner(node, command, timeout)

    def each(
        self, nodes: Sequence[str], command: str, timeout: int = 60
    ) -> dict[str, tuple[int, str]]:
        """The same command on every node at once; ``{sudo}`` in it becomes each node's
        own prefix for root (:meth:`sudo`)."""
        return self.each_own(dict.fromkeys(nodes, command), timeout)

    def each_own(
        self, commands: Mapping[str, str], timeout: int = 60
    ) -> dict[str, tuple[int, str]]:
        """Each node's own command (its plan's paths), all at once; ``{sudo}`` as in
        :meth:`each`."""
        with ThreadPoolExecutor(max_workers=max(1, len(commands))) as pool:
            futures = {
                n: pool.submit(self.runner, n, cmd.replace("{sudo}", self.sudo(n)), timeout)
                for n, cmd in commands.items()
            }
            return {n: f.result() for n, f in futures.items()}

    def unit_states(self, nodes: Sequence[str] | None = None) -> dict[str, dict[str, str]]:
        props = "ActiveState,SubState,Result,NRestarts,ActiveEnterTimestamp,MainPID"
        out = self.each(nodes or self.nodes, f"systemctl show -p {props} {self.unit}", 30)
        states = {}
        for node, (rc, text) in out.items():
            values = tool_output.systemctl_show(text)
            if rc != 0 or "ActiveState" not in values:
                values = {
                    "ActiveState": "unknown",
                    "SubState": "unreachable",
                    "error": text.strip().splitlines()[-1] if text.strip() else f"rc {rc}",
                }
            states[node] = values
        return states

    def api_key(self) -> str | None:
        """The key provision gave the nodes, found in Ansible's order of precedence.

        ``-e sglang_api_key=...``, then ``sglang_api_key`` set in the inventory
        (plain or Ansible Vault, already decrypted and templated by the
        inventory loader) on the first head, then the role default's two sources,
        which the plan names (the role decides them; the key itself is never in the
        plan): its environment variable, else the controller's key file. None when
        no key is required and there is none."""
        for source in (self.extravars, self.inv.hostvars.get(self.heads[0], {})):
            value = source.get("sglang_api_key")
            if value is not None and str(value).strip():
                return str(value).strip()
        s = self.sglang()
        if os.environ.get(s.api_key_env):
            return os.environ[s.api_key_env]
        path = Path(s.api_key_file).expanduser()
        try:
            key = path.read_text().strip()
        except FileNotFoundError:
            if s.api_key_required:
                raise SparkctlError(
                    f"no API key: {s.api_key_env} is not set and {path} does not exist",
                    ExitCode.BAD_INPUT,
                    hint="provision writes it (role sglang); or export the key",
                ) from None
            return None
        except OSError as exc:
            raise SparkctlError(
                f"{path}: cannot read the API key: {exc.strerror}", ExitCode.ENVIRONMENT
            ) from None
        # ansible's password lookup may append " salt=..." to the file.
        return key.split()[0] if key else None

    def redact(self, text: str) -> str:
        """``text`` from a node's log with the API key and HF token blanked.

        SGLang logs its ServerArgs at start-up; whether a version masks api_key
        there is not sparkctl's to assume, so every line sparkctl prints or
        keeps (serve up, serve logs, saved rank logs) goes through here."""
        for secret in self._secrets():
            text = text.replace(secret, REDACTED)
        return text

    def _secrets(self) -> list[str]:
        cached = self._secret_values
        if cached is None:
            cached = [
                os.environ[v]
                for v in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
                if len(os.environ.get(v, "")) >= 8
            ]
            try:
                key = self.api_key()
            except SparkctlError:
                key = None
            if key and len(key) >= 8:
                cached.append(key)
            self._secret_values = cached
        return cached


@dataclass
class Group:
    """One TP group: what serve up waits for and serve verify checks, per endpoint."""

    cluster: Cluster
    name: str
    members: list[str]  # rank order, the head first

    @property
    def head(self) -> str:
        return self.members[0]

    @property
    def nodes(self) -> list[str]:
        return list(self.members)

    @property
    def workers(self) -> list[str]:
        return self.members[1:]

    @property
    def unit(self) -> str:
        return self.cluster.unit

    @property
    def model_name(self) -> str:
        return self.cluster.model_name

    @property
    def base_url(self) -> str:
        node = self.cluster.inv.node(self.head)
        scheme = "https" if self.sglang().tls else "http"
        return f"{scheme}://{node.mgmt_ip}:{self.sglang().port}"

    @property
    def tls_ca_file(self) -> str | None:
        """The CA the head's certificate is checked against (None: plain http, or the
        system's CAs)."""
        s = self.sglang()
        return s.tls_ca_file if s.tls and s.tls_ca_file else None

    def sglang(self, node: str | None = None) -> SglangPlan:
        return self.cluster.sglang(node or self.head)

    def rank(self, node: str) -> int:
        return self.members.index(node)

    def unit_states(self, nodes: Sequence[str] | None = None) -> dict[str, dict[str, str]]:
        return self.cluster.unit_states(nodes or self.members)


def open_cluster(
    inv: inventory.Inventory,
    command: str,
    extravars: Mapping[str, Any] | None = None,
    run_dir: Path | None = None,
) -> Cluster:
    """The validated inventory's plan loaded and ssh_config written, in a fresh run directory
    (or in ``run_dir``, kept from call to call)."""
    if run_dir is None:
        run_dir = results_dir(inv.cluster, command)
        run_dir.mkdir(parents=True)
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
    session = remote.connect(inv, run_dir, extravars)
    return Cluster(
        inv=inv,
        plan=session.plan,
        run_dir=run_dir,
        ssh_config=session.ssh_config,
        extravars=dict(extravars or {}),
        runner=session.runner,
    )
