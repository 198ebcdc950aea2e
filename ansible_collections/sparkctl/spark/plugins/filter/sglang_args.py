"""Filters of the sglang role: the launch command of each rank, and reading it back.

The command line of every rank follows from the inventory alone (SGLang docs,
``multi_node_deployment``; docs/reference.md, "SGLang across nodes")::

    python3 LAUNCHER [--secrets-file F] -- --model-path M --tp-size 4 --nnodes 4
        --node-rank R --dist-init-addr <fabric_a_ip of the group's head>:<port>
        --host H --port P --enable-metrics --dist-timeout 3600 --mem-fraction-static 0.75
        [--served-model-name X] [--ssl-certfile C --ssl-keyfile K] [extra args]

``--tp-size`` is the flag's own name in the release's parser (sglang 0.5.17
``srt/server_args.py``: the flags are the ServerArgs field names with
dashes); ``--tp`` only works as an argparse abbreviation of it.

The Sparks form one or more tensor-parallel groups (``sglang_group``, one
value per host; by default every Spark has the same one). A group's ranks are
its members in ``node_rank`` order (``node_rank`` stays the cluster-wide,
stable order, 0..N-1): its head is the member with the lowest node_rank,
``--node-rank`` is the position within the group and ``--nnodes`` the group's
size. ``--tp-size`` is the TOTAL tensor-parallel degree across the group's
nodes; only the head serves HTTP on a public address. A group of one node has
no rendezvous: SGLang with ``--nnodes 1`` and no ``--dist-init-addr`` meets
itself on 127.0.0.1 (``PortArgs.init_new`` in sglang's server_args.py), so the
command carries none.

The API key never passes through here, and never reaches a command line (``ps``
shows every process's arguments to every local user), the container's
environment (``docker inspect`` shows it) or the journal (SGLang logs its
ServerArgs with the key): the unit runs the role's launcher
(files/sglang_launcher.py), which reads the key from the secrets file, hands
it to SGLang in memory and blanks it from the server's output. The launch
arguments keep the marker ``--api-key ${SGLANG_API_KEY}`` at their end, so the
plan, the verify step and the read-back compare one form: with the marker,
the launcher gets ``--secrets-file``.

Reading back: ``systemctl show -p ExecStart --value`` prints
``{ path=... ; argv[]=... ; ignore_errors=no ; ... }``; the verify step reads
it (and the other ``systemctl show`` properties and the KEY=VALUE files) with
sparkctl's one parser of tool output (plugins/module_utils/tool_output.py) and compares
the arguments the launcher hands to SGLang with the ones computed for the node.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

from ansible_collections.sparkctl.spark.plugins.filter import sparkctl_sinks
from ansible_collections.sparkctl.spark.plugins.module_utils import model_memory, tool_output
from ansible_collections.sparkctl.spark.plugins.module_utils.tp_groups import (
    GROUP_NAME,
    GROUP_NAME_WORDS,
    group_name,
    tp_groups,
)

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # unit tests import this file without Ansible installed

    class AnsibleFilterError(Exception):  # type: ignore[no-redef]
        """Stand-in for ansible.errors.AnsibleFilterError."""


MODULE = "sglang.launch_server"
API_KEY_REF = "${SGLANG_API_KEY}"
# One line of Python without blanks systemd would split differently, $, %,
# double quotes or backslashes (see _systemd_word); an empty key stops it.
# The launcher's file name (files/sglang_launcher.py, installed by the role):
# what the read-back looks for in a unit's argv.
LAUNCHER_NAME = "sglang-launcher.py"
# Words a launch argument may contain: systemd, docker and the shell read them
# alike (no blanks, quotes, backslashes, $, %, or #).
_SAFE_WORD = re.compile(r"^[A-Za-z0-9_.,:/=@+-]+\Z")


# sparkctl's one parser of node tool output: the collection's module_utils, which
# the sparkctl package imports by the same name.
TOOL_OUTPUT = tool_output
# The sink filters (the collection's sparkctl_sinks filter plugin): the unit's
# command lines are written by the one systemd-word writer there.
SINKS = vars(sparkctl_sinks)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise AnsibleFilterError(f"{what} must be an integer, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"{what} must be an integer, got {value!r}") from None


def _rank_of(node: dict[str, Any]) -> int:
    return _int(node.get("node_rank"), f"node_rank of {node.get('name')}")


def _group(nodes: list[dict[str, Any]], node_rank: Any) -> dict[str, Any]:
    """The TP group of the node with ``node_rank`` (cluster-wide ranks checked to be 0..N-1).

    Nodes carry ``group`` (their sglang_group); nodes without one are one group.
    Returns name, members (node dicts in node_rank order), head (the first
    member), rank (position of the node in the group) and ``where``, how messages
    name the group ("the sparks group" when the whole cluster is one).
    """
    if not nodes:
        raise AnsibleFilterError("the sparks group is empty: no node to run SGLang on")
    ranks = sorted(_rank_of(n) for n in nodes)
    if ranks != list(range(len(nodes))):
        listing = ", ".join(f"{n.get('name')}={n.get('node_rank')}" for n in nodes)
        raise AnsibleFilterError(f"node_rank must be 0..{len(nodes) - 1}, each once ({listing})")
    rank = _int(node_rank, "node_rank")
    me = next((n for n in nodes if _rank_of(n) == rank), None)
    if me is None:
        raise AnsibleFilterError(f"node_rank {rank} is outside 0..{len(nodes) - 1}")
    name = me.get("group")
    if name is not None and not GROUP_NAME.match(str(name)):
        raise AnsibleFilterError(
            f"sglang_group of {me.get('name')} is {name!r}: one word of {GROUP_NAME_WORDS}"
        )
    # The grouping the inventory rules check (module_utils/tp_groups.py), on the
    # ranks as integers (checked just above to be 0..N-1).
    ranked = [{**n, "node_rank": _rank_of(n)} for n in nodes]
    members = tp_groups(ranked)[group_name(me)]
    me = next(m for m in members if m["node_rank"] == rank)
    whole = len(members) == len(nodes)
    where = (
        "the sparks group"
        if whole
        else (f"SGLang group {name!r} ({', '.join(str(n.get('name')) for n in members)})")
    )
    return {
        "name": name,
        "members": members,
        "head": members[0],
        "rank": members.index(me),
        "where": where,
    }


def _head_address(group: dict[str, Any]) -> str:
    """The IPv4 fabric_a_ip of the group's head, where its ranks meet."""
    head = group["head"]
    try:
        return str(ipaddress.IPv4Address(str(head.get("fabric_a_ip", ""))))
    except ValueError:
        role = "" if group["where"] == "the sparks group" else f", the head of {group['where']}"
        raise AnsibleFilterError(
            f"{head.get('name')} (node_rank {head.get('node_rank')}{role}) has no IPv4 "
            f"fabric_a_ip ({head.get('fabric_a_ip')!r}): the ranks meet there"
        ) from None


def sglang_tp_group(nodes: list[dict[str, Any]], node_rank: Any) -> dict[str, Any]:
    """The node's TP group for the role's vars and plan: name, head, rank, members, size."""
    group = _group(nodes, node_rank)
    members = [str(n.get("name")) for n in group["members"]]
    return {
        "name": group["name"],
        "head": members[0],
        "rank": group["rank"],
        "members": members,
        "size": len(members),
        "head_fabric_a_ip": str(group["head"].get("fabric_a_ip", "")),
    }


def sglang_launch_args(
    nodes: list[dict[str, Any]],
    node_rank: Any,
    *,
    model_path: str,
    tp_size: Any,
    nnodes: Any,
    dist_port: Any,
    port: Any,
    host: str = "0.0.0.0",  # noqa: S104
    worker_host: str = "127.0.0.1",
    enable_metrics: bool = True,
    dist_timeout: Any = 3600,
    served_model_name: str = "",
    mem_fraction_static: Any = None,
    api_key: bool = False,
    ssl_certfile: str = "",
    ssl_keyfile: str = "",
    extra_args: list[Any] | None = None,
) -> list[str]:
    """launch_server arguments of the node with ``node_rank`` (without the interpreter).

    ``node_rank`` is the cluster-wide rank; the command carries the node's
    position in its TP group (see :func:`_group`).
    """
    group = _group(nodes, node_rank)
    size, where = len(group["members"]), group["where"]
    tp, n = _int(tp_size, "sglang_tp_size"), _int(nnodes, "sglang_nnodes")
    if n != size:
        raise AnsibleFilterError(
            f"sglang_nnodes is {n} but {where} has {size} nodes: SGLang runs one process per node"
        )
    in_group = "" if where == "the sparks group" else f" of {where}"
    if tp < n or tp % n:
        raise AnsibleFilterError(
            f"sglang_tp_size {tp} must be a multiple of the {n} nodes"
            f"{in_group} (--tp-size is the total degree; each node holds "
            "tp/nnodes GPUs)"
        )
    rank = group["rank"]
    dport, hport = _int(dist_port, "sglang_dist_port"), _int(port, "sglang_port")
    for value, what in ((dport, "sglang_dist_port"), (hport, "sglang_port")):
        if not 1 <= value <= 65535:
            raise AnsibleFilterError(f"{what} {value} is not a TCP port")
    # One node meets no other: no rendezvous address (SGLang then uses 127.0.0.1).
    dist = ["--dist-init-addr", f"{_head_address(group)}:{dport}"] if n > 1 else []
    args = [
        "--model-path",
        str(model_path),
        "--tp-size",
        str(tp),
        "--nnodes",
        str(n),
        "--node-rank",
        str(rank),
        *dist,
        "--host",
        str(host if rank == 0 else worker_host),
        "--port",
        str(hport),
    ]
    if enable_metrics:
        args.append("--enable-metrics")
    args += ["--dist-timeout", str(_int(dist_timeout, "sglang_dist_timeout"))]
    # The hardware profile's share of the node's memory (cluster_hw.sglang_mem_fraction_static).
    args += (
        []
        if mem_fraction_static is None
        else ["--mem-fraction-static", repr(_fraction(mem_fraction_static))]
    )
    if served_model_name:
        args += ["--served-model-name", str(served_model_name)]
    if bool(ssl_certfile) != bool(ssl_keyfile):
        raise AnsibleFilterError(
            "sglang_tls_certfile and sglang_tls_keyfile go together: "
            "set both (TLS on the API) or neither"
        )
    if ssl_certfile:
        # uvicorn's TLS (sglang 0.5.17 server_args.py: --ssl-certfile/--ssl-keyfile).
        args += ["--ssl-certfile", str(ssl_certfile), "--ssl-keyfile", str(ssl_keyfile)]
    args += extra_words(extra_args, "sglang_extra_args")
    if api_key:  # last: the launcher appends the real key at the end of argv
        args += ["--api-key", API_KEY_REF]
    refuse_unsafe_words(args, "launch arguments", "systemd, docker and a shell")
    return args


def extra_words(extra_args: Any, name: str) -> list[str]:
    """An inventory's list of extra arguments (``name``), one word per item, as text."""
    if extra_args is not None and not isinstance(extra_args, (list, tuple)):
        # A string would be split into one argument per character.
        raise AnsibleFilterError(
            f"{name} is a {type(extra_args).__name__}: a list, one word per item"
        )
    if any(isinstance(a, (dict, list, tuple, bool)) or a is None for a in extra_args or []):
        raise AnsibleFilterError(
            f"{name}: every item is one word (a string or a number), "
            "not a list, mapping, boolean or null"
        )
    return [str(a) for a in extra_args or []]


def refuse_unsafe_words(args: list[str], what: str, readers: str) -> None:
    """Every argument (but the key marker) one word that ``readers`` (the unit's
    ExecStart, docker, a shell) read alike."""
    bad = [a for a in args if a != API_KEY_REF and not _SAFE_WORD.match(a)]
    if bad:
        raise AnsibleFilterError(
            f"{what} {bad} have characters {readers} would read "
            "differently (blanks, quotes, backslash, $, %, #): one word per list item"
        )


def _fraction(value: Any) -> float:
    """sglang_mem_fraction_static as a float strictly between 0 and 1."""
    try:
        if isinstance(value, bool):
            raise ValueError
        fraction = float(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError(
            f"sglang_mem_fraction_static must be a number between 0 and 1, got {value!r}"
        ) from None
    if not 0 < fraction < 1:
        raise AnsibleFilterError(
            f"sglang_mem_fraction_static {fraction!r} is not between 0 and 1 (exclusive)"
        )
    return fraction


GIB = 1 << 30


def _json_object(text: Any, what: str) -> dict[str, Any] | None:
    """A file's JSON object as the probe read it, or None when it was not there;
    ValueError naming ``what`` when it is not a JSON object."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{what} is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{what} is not a JSON object")
    return data


def sglang_memory_problems(
    weight_sizes: str,
    tp_size: Any,
    mem_fraction_static: Any,
    gpu_memory_gib: Any,
    min_kv_cache_gib: Any,
    *,
    config_text: Any = "",
    index_text: Any = "",
    kv_cache_dtype: Any = "auto",
) -> list[str]:
    """Why the model cannot fit on a rank at ``mem_fraction_static``, or [].

    ``weight_sizes`` is what ``find -L MODEL -maxdepth 1 -name '*.safetensors'
    -printf '%s\\n'`` printed on the node: one file size in bytes a line. With the
    model's config.json and safetensors index (their text, as the probe read them) the
    weights per rank are the model's own split (module_utils/model_memory.py, what
    ``sparkctl model plan`` and ``serve up`` compute): projections and vocabulary
    divided over the ranks, norms and routers whole on each; without them an even
    split. SGLang's static pool is mem_fraction_static x the node's memory; what is
    left after the weights is the KV cache, and with none SGLang stops after loading.
    No weights found (no model yet): no judgement.
    """
    sizes = [int(line) for line in str(weight_sizes).split() if line.strip().isdigit()]
    if not sizes:
        return []
    tp = _int(tp_size, "sglang_tp_size")
    fraction = _fraction(mem_fraction_static)
    try:
        memory, min_kv = float(gpu_memory_gib), float(min_kv_cache_gib)
    except (TypeError, ValueError):
        raise AnsibleFilterError(
            f"cluster_hw.gpu_memory_gib ({gpu_memory_gib!r}) and sglang_min_kv_cache_gib "
            f"({min_kv_cache_gib!r}) must be numbers"
        ) from None
    # A config or index that cannot be read is the model's fault: said as the check's
    # problem (the preflight's assert names the node and the path), not raised.
    try:
        config = _json_object(config_text, "the model's config.json")
        index = _json_object(index_text, "the model's safetensors index")
        model = model_memory.model_from(config, index=index, file_bytes=sum(sizes))
    except model_memory.ModelConfigError as exc:
        return [f"the model's config.json: {exc}"]
    except ValueError as exc:
        return [str(exc)]
    fit = model.fit(
        max(tp, 1),
        memory_gib=memory,
        mem_fraction=fraction,
        min_kv_gib=min_kv,
        kv_dtype=str(kv_cache_dtype or "auto"),
    )
    if fit.fits:
        return []
    return [
        f"{'; '.join(fit.problems)} at tp {tp} ({model.weight_bytes / GIB:.1f} GiB of weights): "
        "serve a smaller or more quantized model, use more Sparks in the group (sglang_tp_size), "
        "or raise sglang_mem_fraction_static if the node has room (lower "
        "sglang_min_kv_cache_gib only to start with a smaller KV cache); "
        "`sparkctl model plan INVENTORY` shows every layout"
    ]


def sglang_launch_value(args: Any, flag: str, default: str = "") -> str:
    """The value of ``flag`` in launch arguments (``--flag V`` or ``--flag=V``), else
    ``default``: e.g. the --kv-cache-dtype an inventory's sglang_extra_args sets."""
    words = [str(a) for a in args] if isinstance(args, list) else []
    for i, word in enumerate(words):
        if word == flag and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return default


def sglang_exec_argv(
    launch_args: list[str],
    method: str,
    *,
    python: str = "/usr/bin/python3",
    launcher: str = "/usr/local/lib/sparkctl/" + LAUNCHER_NAME,
    secrets_file: str = "/etc/sparkctl/sglang-secrets.env",
    engine_path: str = "/usr/bin/docker",
    gpu_args: list[str] | None = None,
    container_name: str = "sparkctl-sglang",
    image: str = "",
    env_files: list[str] | None = None,
    mounts: list[str] | None = None,
    container_args: list[str] | None = None,
    user: str = "",
    wait_for_head: bool = False,
    wait_timeout: Any = 0,
) -> list[str]:
    """The unit's whole ExecStart argv for an installation method.

    The server is started by the launcher (module docstring); ``--api-key
    ${SGLANG_API_KEY}`` in ``launch_args`` becomes ``--secrets-file FILE`` of
    the launcher, which reads the key there. The container method runs the
    same launcher inside the image: every path it names must be mounted
    (``mounts``), because a container sees nothing of the host but its mounts.

    ``wait_for_head`` (sglang_start_on_boot): a worker rank's launcher first waits, up
    to ``wait_timeout`` seconds, until the head's ``--dist-init-addr`` answers
    (files/sglang_launcher.py says why); the head and a group of one wait for nobody."""
    launch_args = [str(a) for a in launch_args]
    own: list[str] = []
    for i in range(len(launch_args) - 1):
        if launch_args[i : i + 2] == ["--api-key", API_KEY_REF]:
            launch_args = launch_args[:i] + launch_args[i + 2 :]
            own = ["--secrets-file", str(secrets_file)]
            break
    if wait_for_head and "--dist-init-addr" in launch_args[:-1]:
        rank = launch_args[launch_args.index("--node-rank") + 1]
        if rank != "0":
            head = launch_args[launch_args.index("--dist-init-addr") + 1]
            seconds = _int(wait_timeout, "sglang_dist_timeout")
            if seconds <= 0:
                raise AnsibleFilterError(f"sglang_dist_timeout must be positive, got {seconds}")
            own += ["--wait-for-head", head, "--wait-timeout", str(seconds)]
    server = [python, str(launcher), *own, "--", *launch_args]
    if method == "venv":
        return server
    if method != "container":
        raise AnsibleFilterError(f"unknown installation method {method!r}")
    if not image:
        raise AnsibleFilterError("the container method needs sglang_image")
    argv = [
        engine_path,
        "run",
        "--rm",
        "--name",
        container_name,
        "--network",
        "host",
        "--ipc",
        "host",
        *(gpu_args or []),
    ]
    if user:
        argv += ["--user", str(user)]
    for env_file in env_files or []:
        argv += ["--env-file", env_file]
    for mount in mounts or []:
        argv += ["--volume", mount]
    argv += [*(container_args or []), image]
    # Inside the image `python3` is the interpreter with sglang installed.
    return [*argv, "python3", *server[1:]]


def sglang_exec_line(argv: list[str]) -> str:
    """argv -> one systemd ExecStart= value: each item one word ($ and % doubled,
    backslashes and quotes escaped, odd words quoted), a newline or another
    control character refused (sparkctl_exec_line of the linked sparkctl_sinks.py)."""
    return str(SINKS["sparkctl_exec_line"](argv, "the sglang unit's command line"))


def sglang_parse_execstart(text: str) -> list[str]:
    """argv of the first command in ``systemctl show -p ExecStart --value`` output."""
    try:
        return list(TOOL_OUTPUT.execstart_argv(str(text)))
    except TOOL_OUTPUT.ToolOutputError as exc:
        raise AnsibleFilterError(str(exc)) from None


def sglang_server_args(argv: list[str]) -> list[str]:
    """The arguments SGLang gets: those after the launcher's ``--`` (with the key
    marker when it reads a secrets file), or after ``-m sglang.launch_server``."""
    argv = [str(a) for a in argv]
    for i, word in enumerate(argv):
        if word == "-m" and argv[i + 1 : i + 2] == [MODULE]:
            return argv[i + 2 :]
        if word.rsplit("/", 1)[-1] == LAUNCHER_NAME:
            rest = argv[i + 1 :]
            if "--" not in rest:
                break
            split = rest.index("--")
            key = ["--api-key", API_KEY_REF] if "--secrets-file" in rest[:split] else []
            return [*rest[split + 1 :], *key]
    raise AnsibleFilterError(f"the command runs neither {LAUNCHER_NAME} nor -m {MODULE}: {argv}")


def sglang_repo_digest(text: str, repository: str) -> str:
    """The ``sha256:...`` of ``repository`` in ``docker image inspect --format
    '{{json .RepoDigests}}'`` output (``["lmsysorg/sglang@sha256:..."]``), or ``""``.

    docker lists Docker Hub images by their short name and others with their
    registry (``docker.io/`` may prefix either form); an image built or loaded
    locally has none ("null" or [])."""
    try:
        digests = json.loads(str(text).strip() or "null") or []
    except ValueError:
        raise AnsibleFilterError(f"RepoDigests is not JSON: {str(text)[:200]!r}") from None
    if not isinstance(digests, list):
        raise AnsibleFilterError(f"RepoDigests is not a list: {str(text)[:200]!r}")
    want = {repository, f"docker.io/{repository}", f"docker.io/library/{repository}"}
    for entry in digests:
        name, sep, digest = str(entry).partition("@")
        if sep and name in want and re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            return digest
    return ""


def sglang_parse_show(text: str) -> dict[str, str]:
    """``systemctl show -p A -p B`` output (KEY=VALUE lines) -> dict."""
    return dict(TOOL_OUTPUT.systemctl_show(str(text)))


def sglang_timespan(text: Any) -> float:
    """A systemd time span as ``systemctl show`` prints it (``10min``, ``1min 30s``) -> seconds."""
    try:
        return float(TOOL_OUTPUT.systemd_timespan(text))
    except TOOL_OUTPUT.ToolOutputError as exc:
        raise AnsibleFilterError(str(exc)) from None


def sglang_ipv4_addresses(text: str) -> list[str]:
    """``ip -j -4 addr show dev X`` -> the IPv4 addresses it carries (no prefix length),
    read by the one parser of ``ip -j`` (tool_output.ip_addr)."""
    try:
        return [
            addr.split("/", 1)[0]
            for addrs in TOOL_OUTPUT.ip_addr(str(text or "[]")).values()
            for addr in addrs
        ]
    except TOOL_OUTPUT.ToolOutputError as exc:
        raise AnsibleFilterError(str(exc)) from None


def sglang_parse_env(text: str) -> dict[str, str]:
    """KEY=VALUE lines (comments, blank lines skipped) -> dict; bad or repeated lines fail."""
    try:
        return dict(TOOL_OUTPUT.env_file(str(text)))
    except TOOL_OUTPUT.ToolOutputError as exc:
        raise AnsibleFilterError(str(exc)) from None


# Who reads the files of templates/sglang-env.j2 (the template says why).
ENV_READERS = ("systemd", "docker", "sh", "sparkctl")


def sglang_env_problems(env: dict[str, Any]) -> list[str]:
    """Variables that systemd's EnvironmentFile=, docker's --env-file and sh would read
    differently (what the template's sparkctl_env_line would refuse; no secret shown)."""
    return list(SINKS["sparkctl_env_problems"](env, ENV_READERS))


def sglang_env_diff(actual: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """How a file's variables differ from the expected ones (compared as text)."""
    act = {str(k): str(v) for k, v in dict(actual).items()}
    exp = {str(k): str(v) for k, v in dict(expected).items()}
    diff = [f"{k} is missing (expected {exp[k]!r})" for k in sorted(exp.keys() - act.keys())]
    diff += [f"{k}={act[k]!r} is not expected" for k in sorted(act.keys() - exp.keys())]
    diff += [
        f"{k}={act[k]!r}, expected {exp[k]!r}"
        for k in sorted(exp.keys() & act.keys())
        if act[k] != exp[k]
    ]
    return diff


def _file_problems(files: dict[str, Any], path: str, mode: str, group: str = "root") -> list[str]:
    info = files.get(path) or {"exists": False}
    if not info.get("exists"):
        return [f"{path} is missing"]
    if (info.get("owner"), info.get("group"), info.get("mode")) != ("root", group, mode):
        return [
            f"{path} is {info.get('owner')}:{info.get('group')} mode {info.get('mode')}; "
            f"want root:{group} {mode}"
        ]
    return []


def _image_id(result: dict[str, Any]) -> str:
    """The id `docker image inspect --format {{.Id}}` printed, else what it said."""
    if result.get("rc") == 0 and str(result.get("stdout", "")).strip():
        return str(result["stdout"]).strip()
    last = (str(result.get("stderr", "")).strip().splitlines() or ["no answer"])[-1]
    return f"missing ({last})"


def _served_tag_problems(cmds: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """The local tag (container method, ``served_tag``) must name the image the unit
    runs (``image_ref``): else `docker image prune` deletes that image while no
    container uses it (tasks/install_served_tag.yml)."""
    tag = str(want.get("served_tag") or "")
    if not tag:
        return []
    image = _image_id(cmds.get("image", {}))
    served = _image_id(cmds.get("served", {}))
    if image == served and not image.startswith("missing"):
        return []
    return [
        f"{tag} is {served}, but the unit runs {want['image_ref']}, which is {image}: "
        "without the tag on that image `docker image prune` deletes it while the service "
        "is down (sparkctl provision tags it)"
    ]


def sglang_verify_problems(read: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """Everything verify finds wrong in one sparkctl_probe reading (verify.yml), as messages.

    ``read`` is the probe's result (files, commands show/execstart/help); ``want``
    holds what the inventory implies: unit, unit_path, env_files, restart_sec,
    start_limit_burst, start_limit_interval, argv, node_rank, env_file, env,
    version_file, version, secrets_file, secrets_group, installed, launcher, method, and
    for the container method served_tag and image_ref (commands image/served: the ids
    of both); start_on_boot (the unit enabled, else disabled) and engine_service (the
    engine's unit that must be enabled with it, command engine_unit; "" for none). An
    empty list means the node is as the inventory says.
    """
    files: dict[str, Any] = read.get("files", {})
    cmds: dict[str, Any] = read.get("commands", {})
    problems: list[str] = []
    unit = want["unit"]
    at_boot = bool(want.get("start_on_boot", False))
    enablement = (
        ("enabled", "sglang_start_on_boot: every rank starts at boot")
        if at_boot
        else ("disabled", "`sparkctl serve` starts it")
    )

    show_text = str(cmds.get("show", {}).get("stdout", ""))
    show = sglang_parse_show(show_text)
    env_files = TOOL_OUTPUT.systemctl_environment_files(show_text)
    try:
        timing_ok = sglang_timespan(show.get("RestartUSec", "")) == float(
            want["restart_sec"]
        ) and sglang_timespan(show.get("StartLimitIntervalUSec", "")) == float(
            want["start_limit_interval"]
        )
    except AnsibleFilterError:
        timing_ok = False
    if (
        show.get("LoadState") != "loaded"
        or show.get("FragmentPath") != want["unit_path"]
        or show.get("UnitFileState") != enablement[0]
        or show.get("Restart") != "on-failure"
        or not timing_ok
        or show.get("StartLimitBurst") != str(want["start_limit_burst"])
        or env_files != list(want["env_files"])
    ):
        problems.append(
            f"{unit} reads LoadState={show.get('LoadState', '?')}, "
            f"FragmentPath={show.get('FragmentPath', '?')} (want {want['unit_path']}), "
            f"UnitFileState={show.get('UnitFileState', '?')} "
            f"(want {enablement[0]}: {enablement[1]}), "
            f"Restart={show.get('Restart', '?')} RestartUSec={show.get('RestartUSec', '?')} "
            f"StartLimitBurst={show.get('StartLimitBurst', '?')} "
            f"StartLimitIntervalUSec={show.get('StartLimitIntervalUSec', '?')} "
            f"(want on-failure, {want['restart_sec']} s, {want['start_limit_burst']} in "
            f"{want['start_limit_interval']} s), environment files {env_files} "
            f"(want {list(want['env_files'])})"
        )

    want_argv = [str(a) for a in want["argv"]]
    try:
        argv = sglang_parse_execstart(str(cmds.get("execstart", {}).get("stdout", "")).strip())
        args = sglang_server_args(argv)
        rank_ok = "--node-rank" in args and args[args.index("--node-rank") + 1] == str(
            want["node_rank"]
        )
        if argv != want_argv or not rank_ok:
            problems.append(
                f"ExecStart of {unit} runs {' '.join(argv)}; expected {' '.join(want_argv)}"
            )
    except AnsibleFilterError as exc:
        problems.append(f"ExecStart of {unit}: {exc}")

    for path, expected in (
        (want["env_file"], want["env"]),
        (want["version_file"], want["version"]),
    ):
        info = files.get(path) or {"exists": False}
        if not info.get("exists"):
            continue  # reported with the modes below
        try:
            actual = sglang_parse_env(info.get("content", ""))
            problems += [f"{path}: {d}" for d in sglang_env_diff(actual, expected)]
        except AnsibleFilterError as exc:
            problems.append(f"{path}: {exc}")

    # The secrets file: root's, readable by the server's group only (the launcher
    # reads it as the server's user); root's alone where the server runs as root.
    secrets_group = str(want.get("secrets_group") or "root")
    for path, mode, group in (
        (want["env_file"], "0644", "root"),
        (want["version_file"], "0644", "root"),
        (want["unit_path"], "0644", "root"),
        (want["secrets_file"], "0640" if secrets_group != "root" else "0600", secrets_group),
    ):
        problems += _file_problems(files, path, mode, group)

    problems += [
        f"{path} is missing ({want['method']} installation)"
        for path in want["installed"]
        if not (files.get(path) or {}).get("exists")
    ]

    problems += _served_tag_problems(cmds, want)

    engine = str(want.get("engine_service") or "")
    if engine:
        state = sglang_parse_show(str(cmds.get("engine_unit", {}).get("stdout", ""))).get(
            "UnitFileState", "?"
        )
        # static: no [Install] section, started only as a dependency, which Requires= is
        if state not in ("enabled", "static"):
            problems.append(
                f"{engine} is {state} at boot; want enabled: {unit} starts at boot "
                "(sglang_start_on_boot) and needs it"
            )

    helped = cmds.get("help", {})
    flags = ("--dist-init-addr", "--node-rank", "--nnodes", "--enable-metrics")
    if helped.get("rc") != 0 or not all(f in str(helped.get("stdout", "")) for f in flags):
        last = (str(helped.get("stderr", "")).strip().splitlines() or [""])[-1]
        lacks = ", ".join(f for f in flags if f not in str(helped.get("stdout", "")))
        launcher = " ".join(map(str, want["launcher"]))
        problems.append(
            f"{launcher} -m {MODULE} --help: rc {helped.get('rc')}, "
            + (last or f"usage lacks {lacks}")
        )
    return problems


class FilterModule:
    """Launch command, ExecStart read-back and environment-file filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "sglang_launch_args": sglang_launch_args,
            "sglang_memory_problems": sglang_memory_problems,
            "sglang_launch_value": sglang_launch_value,
            "sglang_tp_group": sglang_tp_group,
            "sglang_exec_argv": sglang_exec_argv,
            "sglang_exec_line": sglang_exec_line,
            "sglang_parse_execstart": sglang_parse_execstart,
            "sglang_server_args": sglang_server_args,
            "sglang_parse_show": sglang_parse_show,
            "sglang_repo_digest": sglang_repo_digest,
            "sglang_timespan": sglang_timespan,
            "sglang_parse_env": sglang_parse_env,
            "sglang_ipv4_addresses": sglang_ipv4_addresses,
            "sglang_env_problems": sglang_env_problems,
            "sglang_env_diff": sglang_env_diff,
            "sglang_verify_problems": sglang_verify_problems,
        }
