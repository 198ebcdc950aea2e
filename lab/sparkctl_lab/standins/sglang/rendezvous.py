"""The distributed start-up of one rank, over real sockets, in the release's order.

What ``init_torch_distributed`` (sglang:srt/distributed/bootstrap.py:51)
does on a multi-node group, each step a real TCP connection between the
nodes:

1. torch's TCPStore rendezvous at ``--dist-init-addr``: the head listens,
   the others connect and retry (a refused connect silently, other errors
   with a c10d warning, torch:torch/csrc/distributed/c10d/socket.cpp) until
   ``--dist-timeout``;
2. the Gloo full mesh of the CPU groups on ``GLOO_SOCKET_IFNAME`` (or the
   address the hostname resolves to, falling back to loopback);
3. SGLang's PyNccl communicator: NCCL bootstraps on ``NCCL_SOCKET_IFNAME``,
   finds no IB device (the lab has no RDMA) and connects over NET/Socket,
   retrying a refused or unreachable peer as NCCL 2.28.9 does;
4. the TP group's message queue (sglang:srt/distributed/device_communicators/
   shm_broadcast.py): TP0 binds it at ``get_local_ip_auto()`` (SGLANG_HOST_IP)
   and every other rank connects to that address and waits, without a
   timeout, until TP0 answers (``wait_until_ready``, shm_broadcast.py:314).

Modelled, not real: a node is identified by the address it reached the
rendezvous from, and another node's loopback address is unreachable from
here (a Gloo fallback to 127.0.0.1 fails as it does between machines). The
message queue is reachable over the fabric only: when TP0's address is not
on its ``NCCL_SOCKET_IFNAME`` subnet the other ranks never reach it, and
every rank waits after "CustomAllreduce is disabled ..." for ever, as a
Spark pair does with SGLANG_HOST_IP on the management NIC
(MiaAI-Lab/Qwen3.8-Flash-Next-Dual-DGX-Sparks #3). Only TP0's address
matters: the readers connect to the writer's ``connect_ip``
(shm_broadcast.py:196), their own SGLANG_HOST_IP is not used.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import ipaddress
import json
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from . import release as r

SIOCGIFADDR = 0x8915
SIOCGIFNETMASK = 0x891B
# torch's default process-group timeout, when --dist-timeout is not given.
DEFAULT_DIST_TIMEOUT = 1800
# dist_barrier_after_load's monitored barrier (load_model_utils.py:41).
UNBALANCED_MODEL_LOADING_TIMEOUT_S = 480

_DATA = struct.Struct("!4sBxxxIII")  # magic, op, sequence, layer, payload length
MAGIC = b"SGL1"
OP_STEP, OP_PING, OP_REPLY = 1, 2, 0x81


# ---------------------------------------------------------------- interfaces
def iface_ipv4(name: str) -> tuple[str, int] | None:
    """Primary IPv4 address and prefix length of an interface (SIOCGIFADDR), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("256s", name.encode()[:15])
        try:
            addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFADDR, req)[20:24])
            mask = socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFNETMASK, req)[20:24])
        except OSError:
            return None
    return addr, ipaddress.IPv4Network(f"0.0.0.0/{mask}").prefixlen


def interfaces() -> list[str]:
    return [name for _, name in socket.if_nameindex()]


def bindable(ip: str) -> bool:
    """Whether ``ip`` is an address of this machine."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((ip, 0))
    except OSError:
        return False
    return True


def on_interface(ip: str | None, name: str | None) -> bool:
    """``ip`` is an address of this machine inside the subnet of interface ``name``."""
    if not ip or not name:
        return False
    found = iface_ipv4(name)
    try:
        inside = found is not None and ipaddress.IPv4Address(ip) in ipaddress.IPv4Network(
            f"{found[0]}/{found[1]}", strict=False
        )
    except ValueError:
        return False
    return inside and bindable(ip)


def local_ip_auto() -> str:
    """get_local_ip_auto("0.0.0.0") (sglang:srt/utils/network.py:334): SGLANG_HOST_IP or
    HOST_IP, else the default route's source address, else the hostname's, else 0.0.0.0."""
    explicit = os.environ.get("SGLANG_HOST_IP", "") or os.environ.get("HOST_IP", "")
    if explicit:
        return explicit.strip().strip("[]")
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("8.8.8.8", 80))  # no packet is sent; picks the default route's source
        return str(s.getsockname()[0])
    with contextlib.suppress(OSError):
        ip = socket.gethostbyname(r.HOSTNAME)
        if ip not in ("127.0.0.1", "0.0.0.0"):  # noqa: S104
            return ip
    return "0.0.0.0"  # noqa: S104


def nccl_interface() -> tuple[str, str] | None:
    """(name, address) NCCL bootstraps on: NCCL_SOCKET_IFNAME (prefix match, ``^`` excludes,
    ``=`` exact, nccl:src/misc/socket.cc ncclFindInterfaces), else ib*, else any but lo/docker."""
    spec = os.environ.get("NCCL_SOCKET_IFNAME", "")
    names = interfaces()
    if len(spec) > 1:
        exclude = spec.startswith("^")
        patterns = spec.lstrip("^").split(",")

        def wanted(n: str) -> bool:
            hit = any(n == p[1:] if p.startswith("=") else n.startswith(p) for p in patterns if p)
            return hit != exclude

        candidates = [n for n in names if wanted(n)]
    else:
        candidates = sorted(
            (n for n in names if n != "lo" and not n.startswith("docker")),
            key=lambda n: (not n.startswith("ib"), names.index(n)),
        )
    for name in candidates:
        found = iface_ipv4(name)
        if found:
            return name, found[0]
    return None


# -------------------------------------------------------------------- sockets
def connect(addr: tuple[str, int], source: str | None, timeout: float) -> socket.socket:
    """A TCP connection to ``addr`` (from ``source`` when given), Nagle off."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        if source:
            sock.bind((source, 0))
        sock.connect(addr)
    except OSError:
        sock.close()
        raise
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def os_errno(err: OSError) -> int:
    return err.errno if err.errno is not None else errno.ETIMEDOUT


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionResetError(errno.ECONNRESET, "Connection closed by remote peer")
        buf += chunk
    return bytes(buf)


def send_json(sock: socket.socket, obj: Any) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def recv_json(sock: socket.socket) -> Any:
    (length,) = struct.unpack("!I", recv_exact(sock, 4))
    if length > 1 << 24:
        raise ValueError("message too large")
    return json.loads(recv_exact(sock, length))


def frame(op: int, seq: int, layer: int = 0, length: int = 0) -> bytes:
    return _DATA.pack(MAGIC, op, seq, layer, length)


def unframe(data: bytes) -> tuple[bytes, int, int, int, int]:
    magic, op, seq, layer, length = _DATA.unpack(data)
    return magic, op, seq, layer, length


FRAME_SIZE = _DATA.size


# ----------------------------------------------------------------------- node
@dataclass
class Node:
    """This process: one rank (one GPU per Spark, so the node rank is the TP rank)."""

    args: dict[str, Any]
    rank: int
    nnodes: int
    dist_host: str
    dist_port: int
    timeout: float
    nccl_if: str = ""
    nccl_ip: str = ""
    gloo_ip: str = ""
    host_ip: str = ""
    host_on_fabric: bool = False
    listeners: dict[str, socket.socket] = field(default_factory=dict)
    # Failures the real stack hits only when their step comes (Gloo device, ZMQ bind).
    deferred: dict[str, BaseException] = field(default_factory=dict)
    world: dict[int, dict[str, Any]] = field(default_factory=dict)
    links: dict[int, socket.socket] = field(default_factory=dict)
    # torch's TCPStore connections stay open for the process' life.
    store: list[socket.socket] = field(default_factory=list)

    @property
    def tp(self) -> int:
        """First TP rank on this node."""
        return self.rank * (int(self.args["tp_size"]) // self.nnodes)

    @property
    def prefix(self) -> str:
        return r.tp_prefix(self.tp, self.args["tp_size"])

    @property
    def timeout_ms(self) -> int:
        return int(self.timeout * 1000)

    # -- addresses ---------------------------------------------------------------
    def resolve_addresses(self) -> None:
        self.host_ip = local_ip_auto()
        found = nccl_interface()
        if found:
            self.nccl_if, self.nccl_ip = found
        # An interface with several addresses (the unit tests put every "node"
        # on lo): this node's is SGLANG_HOST_IP when it is on that interface.
        self.host_on_fabric = on_interface(self.host_ip, self.nccl_if)
        if self.host_on_fabric:
            self.nccl_ip = self.host_ip
        try:
            self.gloo_ip = self._gloo_address()
        except RuntimeError as err:
            self.deferred["gloo"] = err

    def _gloo_address(self) -> str:
        spec = os.environ.get("GLOO_SOCKET_IFNAME", "")
        if spec:
            name = spec.split(",")[0]
            found = iface_ipv4(name)
            if found is None:
                raise RuntimeError(r.GLOO_NO_ADDRESS(name=name))
            return self.host_ip if on_interface(self.host_ip, name) else found[0]
        ip = None
        with contextlib.suppress(OSError):
            ip = socket.gethostbyname(r.HOSTNAME)
        if ip is None or ipaddress.IPv4Address(ip).is_loopback or not bindable(ip):
            self.deferred["gloo_loopback"] = RuntimeError("loopback")
            return "127.0.0.1"
        return ip

    def open_listeners(self) -> None:
        """Gloo and NCCL endpoints; on TP0 also the message queue (a ZMQ bind)."""
        for name, ip in (("gloo", self.gloo_ip), ("nccl", self.nccl_ip)):
            if ip:
                self.listeners[name] = socket.create_server((ip, 0), backlog=64)
        if self.rank == 0:
            try:
                self.listeners["mq"] = socket.create_server((self.host_ip, 0), backlog=64)
            except OSError as err:
                self.deferred["mq"] = r.ZMQError(
                    f"{os.strerror(os_errno(err))} (addr='tcp://{self.host_ip}:0')"
                )

    def endpoint(self, name: str) -> list[Any] | None:
        srv = self.listeners.get(name)
        if srv is None:
            return None
        host, port = srv.getsockname()[:2]
        return [host, port]

    def hello(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "nnodes": self.nnodes,
            "tp_size": self.args["tp_size"],
            "host": r.HOSTNAME,
            "gloo": self.endpoint("gloo"),
            "nccl": self.endpoint("nccl"),
            "mq": self.endpoint("mq"),
            "mq_on_fabric": self.host_on_fabric,
        }

    # -- 1. TCPStore -------------------------------------------------------------
    def rendezvous(self) -> None:
        if self.nnodes == 1:
            self.world = {0: {**self.hello(), "node": self.dist_host}}
            # A rank alone: its three Gloo groups connect to nobody (the release's own
            # docs output, e.g. wxsms/sgl-project.github.io markdown/advanced_features/
            # structured_outputs_for_reasoning_models.md).
            for _ in range(3):
                r.write(r.GLOO_CONNECTED(rank=0, peers=0), "stdout")
            return
        if self.rank == 0:
            self._store_server()
        else:
            self._store_client()

    def _store_server(self) -> None:
        try:
            srv = socket.create_server((self.dist_host, self.dist_port), backlog=64)
        except OSError as err:
            code = os_errno(err)
            raise r.DistNetworkError(
                r.DIST_LISTEN_FAILED(
                    port=self.dist_port,
                    code=code,
                    name=errno.errorcode.get(code, "?"),
                    message=os.strerror(code).lower(),
                )
            ) from None
        self.world = {0: {**self.hello(), "node": self.dist_host}}
        joined: dict[int, socket.socket] = {}
        srv.settimeout(0.5)
        started = time.monotonic()
        try:
            while len(self.world) < self.nnodes:
                elapsed = time.monotonic() - started
                if elapsed > self.timeout:
                    # TCPStore::waitForWorkers: whole seconds, once past the timeout.
                    raise r.DistStoreError(
                        r.DIST_CLIENTS_JOINED(
                            seconds=int(self.timeout) + 1, joined=len(self.world), world=self.nnodes
                        )
                    )
                try:
                    conn, peer = srv.accept()
                except TimeoutError:
                    continue
                self._admit(conn, peer[0], joined)
            for conn in joined.values():
                with contextlib.suppress(OSError):
                    send_json(conn, {"world": {str(k): v for k, v in self.world.items()}})
            self.store.extend(joined.values())
        except BaseException:
            for conn in joined.values():
                conn.close()
            raise
        finally:
            srv.close()

    def _admit(self, conn: socket.socket, peer: str, joined: dict[int, socket.socket]) -> None:
        """A client of the store; one that cannot be part of this world is dropped, as
        torch drops a connection it cannot validate (the client sees 0 bytes)."""
        conn.settimeout(10)
        try:
            hello = recv_json(conn)
        except (OSError, ValueError):
            conn.close()
            return
        rank = hello.get("rank")
        if (
            not isinstance(rank, int)
            or not 0 < rank < self.nnodes
            or rank in self.world
            or (hello.get("nnodes"), hello.get("tp_size")) != (self.nnodes, self.args["tp_size"])
        ):
            conn.close()
            return
        hello["node"] = peer
        self.world[rank] = hello
        joined[rank] = conn

    def _store_client(self) -> None:
        started = time.monotonic()
        last_warn = 0.0
        conn = None
        while conn is None:
            if time.monotonic() - started > self.timeout:
                r.c10d(
                    "E",
                    r.C10D_CONNECT_TIMEOUT,
                    "socket.cpp:1011",
                    ms=self.timeout_ms,
                    host=self.dist_host,
                    port=self.dist_port,
                )
                raise r.DistNetworkError(
                    r.DIST_CLIENT_TIMEOUT(
                        ms=self.timeout_ms, host=self.dist_host, port=self.dist_port
                    )
                )
            try:
                conn = connect(
                    (self.dist_host, self.dist_port),
                    self.host_ip if self.host_on_fabric else None,
                    5.0,
                )
            except OSError as err:
                code = os_errno(err)
                # Refused and reset: the server is not listening yet; torch retries
                # without a word. Anything else is warned about (socket.cpp).
                if (
                    code not in (errno.ECONNREFUSED, errno.ECONNRESET)
                    and time.monotonic() - last_warn >= 10
                ):
                    r.c10d(
                        "W",
                        r.C10D_CONNECT_FAILED,
                        "socket.cpp:697",
                        host=self.dist_host,
                        port=self.dist_port,
                        errno=code,
                        strerror=os.strerror(code),
                    )
                    last_warn = time.monotonic()
                time.sleep(0.5)
        try:
            send_json(conn, self.hello())
            conn.settimeout(max(self.timeout - (time.monotonic() - started), 1.0) + 5)
            reply = recv_json(conn)
        except (OSError, ValueError):
            conn.close()
            raise r.DistNetworkError(r.DIST_RECV_CLOSED()) from None
        conn.settimeout(None)
        self.store.append(conn)
        self.world = {int(k): v for k, v in reply["world"].items()}

    # -- 2. Gloo -----------------------------------------------------------------
    def gloo_mesh(self) -> None:
        if "gloo" in self.deferred:
            raise self.deferred["gloo"]
        if "gloo_loopback" in self.deferred:
            r.c10d("W", r.GLOO_LOOPBACK, "ProcessGroupGloo.cpp:524", rank=self.tp)
        peers = sorted(k for k in self.world if k != self.rank)
        accepted: dict[int, socket.socket] = {}
        lower = {k for k in peers if k < self.rank}
        srv = self.listeners["gloo"]
        deadline = time.monotonic() + self.timeout

        def accept_lower() -> None:
            srv.settimeout(0.5)
            while lower - set(accepted) and time.monotonic() < deadline:
                try:
                    conn, _ = srv.accept()
                    conn.settimeout(5)
                    accepted[int(recv_json(conn)["rank"])] = conn
                except (OSError, ValueError, KeyError):
                    continue

        acceptor = threading.Thread(target=accept_lower, daemon=True)
        acceptor.start()
        out: list[socket.socket] = []
        try:
            for peer in (k for k in peers if k > self.rank):
                out.append(self._gloo_connect(peer, deadline))
            acceptor.join(max(0.0, deadline - time.monotonic()))
            if lower - set(accepted):
                self._gloo_failure("no error")
            # One line per Gloo CPU group of this rank (parallel_state.py): the world and the
            # TP group span the nodes, the PP group (pp_size 1) is this rank alone.
            for group_peers in (len(peers), len(peers), 0):
                r.write(r.GLOO_CONNECTED(rank=self.tp, peers=group_peers), "stdout")
        finally:
            for conn in [*out, *accepted.values()]:
                conn.close()

    def _gloo_connect(self, peer: int, deadline: float) -> socket.socket:
        # A peer without a Gloo device has no endpoint (it is failing): refused.
        node, mine = self.world[peer]["node"], self.world[self.rank]["node"]
        ip, port = self.world[peer]["gloo"] or (node, 0)
        remote_loopback = ipaddress.IPv4Address(ip).is_loopback and node not in (ip, mine)
        code = errno.ETIMEDOUT
        while time.monotonic() < deadline:
            if remote_loopback or not port:
                # Modelled: another node's loopback is this node's own, where
                # nothing listens on that port: refused, as between machines.
                code = errno.ECONNREFUSED
                time.sleep(0.5)
                continue
            try:
                conn = connect((ip, port), None, 5.0)
                send_json(conn, {"rank": self.rank})
            except OSError as err:
                code = os_errno(err)
                time.sleep(0.5)
                continue
            return conn
        reason = "Connection refused" if code == errno.ECONNREFUSED else os.strerror(code)
        self._gloo_failure(f"timed out connecting: SO_ERROR: {reason}, remote=[{ip}]:{port}")
        raise AssertionError("unreachable")

    def _gloo_failure(self, detail: str) -> None:
        r.c10d("E", r.GLOO_FULL_MESH, "ProcessGroupGloo.cpp:143", rank=self.tp, detail=detail)
        raise RuntimeError(r.GLOO_FULL_MESH(detail=detail))

    # -- 3. NCCL (SGLang's PyNcclCommunicator) --------------------------------------
    def nccl_init(self) -> None:
        tp_size = self.args["tp_size"]
        if tp_size == 1:
            return
        if self.tp == 0:
            r.log(r.SGLANG_NCCL, self.prefix, version=r.NCCL_VERSION)
        spec = os.environ.get("NCCL_SOCKET_IFNAME", "")
        if len(spec) > 1:
            r.nccl_info(r.NCCL_IFNAME_ENV, ("ENV",), spec=spec)
        if not self.nccl_ip:
            r.nccl_warn(r.NCCL_NO_IFACE, "bootstrap.cc:114")
            raise RuntimeError(r.NCCL_ERROR(error=r.NCCL_INVALID_USAGE))
        r.nccl_info(r.NCCL_BOOTSTRAP, ("BOOTSTRAP",), ifname=self.nccl_if, ip=self.nccl_ip)
        if self.tp == 0:
            r.nccl_info(r.NCCL_VERSION_LINE, ("INIT",), version=r.NCCL_VERSION)
        # The lab has no RDMA device: NCCL's IB transport finds none and the
        # Socket transport carries the data (nccl:src/plugin/net.cc).
        net = ("INIT", "NET")
        r.nccl_info(r.NCCL_IB_NONE, net)
        r.nccl_info(r.NCCL_PLUGIN_FAILED, net, name="IB")
        r.nccl_info(r.NCCL_SOCKET_USING, net, ifname=self.nccl_if, ip=self.nccl_ip)
        r.nccl_info(r.NCCL_PLUGIN_INIT, net, name="Socket")
        r.nccl_info(r.NCCL_PLUGIN_ASSIGNED, net, name="Socket")
        r.nccl_info(r.NCCL_USING_NETWORK, ("INIT",), name="Socket")
        if self.rank == 0:
            for peer in sorted(k for k in self.world if k):
                self.links[peer] = self._nccl_connect(peer)
        else:
            self.links[0] = self._nccl_accept()
        n = self.nnodes
        r.nccl_info(
            r.NCCL_CHANNEL,
            net,
            channel=0,
            src=(self.rank - 1) % n,
            dst=self.rank,
            way="receive",
            name="Socket",
        )
        r.nccl_info(
            r.NCCL_CHANNEL,
            net,
            channel=0,
            src=self.rank,
            dst=(self.rank + 1) % n,
            way="send",
            name="Socket",
        )
        comm = int.from_bytes(os.urandom(6), "big")
        comm_id = int.from_bytes(
            hashlib.sha256(f"{self.dist_host}:{self.dist_port}".encode()).digest()[:8], "big"
        )
        r.nccl_info(
            r.NCCL_INIT_COMPLETE,
            ("INIT",),
            comm=comm,
            rank=self.tp,
            nranks=tp_size,
            comm_id=comm_id,
        )

    def _nccl_connect(self, peer: int) -> socket.socket:
        """socketConnectCheck (nccl:src/misc/socket.cc:571): refused, unreachable and timed-out
        connects are retried NCCL_SOCKET_RETRY_CNT times, sleeping n x 100 ms."""
        ip, port = self.world[peer]["nccl"] or ("0.0.0.0", 0)  # noqa: S104
        addr = f"{ip}<{port}>"
        retries = int(os.environ.get("NCCL_SOCKET_RETRY_CNT", "34"))
        sleep_ms = int(os.environ.get("NCCL_SOCKET_RETRY_SLEEP_MSEC", "100"))
        attempt = 0
        while True:
            try:
                if not port:
                    raise ConnectionRefusedError(errno.ECONNREFUSED, "no NCCL endpoint")
                conn = connect((ip, port), self.nccl_ip, 5.0)
                send_json(conn, {"rank": 0})
                conn.settimeout(30)
                recv_json(conn)
            except (OSError, ValueError) as err:
                code = os_errno(err) if isinstance(err, OSError) else errno.ECONNRESET
                if code in (
                    errno.ECONNREFUSED,
                    errno.EHOSTUNREACH,
                    errno.ETIMEDOUT,
                    errno.EAGAIN,
                    errno.EINTR,
                ):
                    if attempt == retries:
                        r.nccl_warn(
                            r.NCCL_CONNECT_EXCEEDED,
                            "misc/socket.cc:582",
                            addr=addr,
                            strerror=os.strerror(code),
                            n=attempt + 1,
                        )
                        self._unwind(6)
                        raise RuntimeError(r.NCCL_ERROR(error=r.NCCL_REMOTE_ERROR)) from None
                    attempt += 1
                    r.nccl_info(
                        r.NCCL_CONNECT_RETRY,
                        ("NET", "INIT"),
                        addr=addr,
                        strerror=os.strerror(code),
                        n=attempt,
                        ms=attempt * sleep_ms,
                    )
                    time.sleep(attempt * sleep_ms / 1000)
                    continue
                r.nccl_warn(
                    r.NCCL_CONNECT_FAILED,
                    "misc/socket.cc:596",
                    addr=addr,
                    strerror=os.strerror(code),
                )
                self._unwind(2)
                raise RuntimeError(r.NCCL_ERROR(error=r.NCCL_SYSTEM_ERROR)) from None
            conn.settimeout(None)
            return conn

    @staticmethod
    def _unwind(code: int) -> None:
        for where in ("misc/socket.cc:661", "bootstrap.cc:285", "init.cc:1534"):
            r.nccl_info(r.NCCL_UNWIND, ("ALL", "INIT"), where=where, code=code)

    def _nccl_accept(self) -> socket.socket:
        """Wait for TP0's connection; a TP0 that went away closes the store connection."""
        srv = self.listeners["nccl"]
        srv.settimeout(0.5)
        while True:
            self._check_store()
            try:
                conn, _ = srv.accept()
                conn.settimeout(30)
                recv_json(conn)
                send_json(conn, {"rank": self.rank})
            except TimeoutError:
                continue
            except (OSError, ValueError):
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(None)
            return conn

    def _store_closed(self) -> bool:
        """Whether a store connection has been closed by the other end (TP0 is gone)."""
        for conn in self.store:
            conn.setblocking(False)
            try:
                data = conn.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            finally:
                conn.setblocking(True)
            if not data:
                return True
        return False

    def _check_store(self) -> None:
        """A closed store connection means TP0 is gone: NCCL's bootstrap sees the peer close."""
        if self._store_closed():
            head = self.world[0]["nccl"] or [self.dist_host, self.dist_port]
            r.nccl_warn(r.NCCL_PEER_CLOSED, "misc/socket.cc:71", addr=f"{head[0]}<{head[1]}>")
            raise RuntimeError(r.NCCL_ERROR(error=r.NCCL_REMOTE_ERROR))

    # -- 4. the message queue ------------------------------------------------------
    def message_queue(self) -> None:
        """MessageQueue.create_from_process_group + wait_until_ready: no timeout."""
        if self.nnodes == 1:
            return
        if self.rank == 0:
            self._mq_writer()
        else:
            self._mq_reader()

    def _mq_writer(self) -> None:
        if "mq" in self.deferred:
            raise self.deferred["mq"]
        srv = self.listeners["mq"]
        srv.settimeout(1.0)
        readers: dict[int, socket.socket] = {}
        try:
            while len(readers) < self.nnodes - 1:
                try:
                    conn, _ = srv.accept()
                    conn.settimeout(5)
                    readers[int(recv_json(conn)["ready"])] = conn
                except (OSError, ValueError, KeyError):
                    continue
            for conn in readers.values():
                send_json(conn, {"go": True})
        finally:
            for conn in readers.values():
                conn.close()

    def _mq_reader(self) -> None:
        head = self.world[0]
        ip, port = head["mq"] or ("0.0.0.0", 0)  # noqa: S104
        while not port:
            # TP0 could not bind its queue: the handle never comes, and this rank
            # waits in the Gloo broadcast until TP0's process is gone.
            if self._store_closed():
                gloo = head["gloo"] or [head["node"], 0]
                raise RuntimeError(r.GLOO_PEER_CLOSED(ip=gloo[0], port=gloo[1]))
            time.sleep(0.5)
        while not head["mq_on_fabric"]:
            # Modelled: TP0's address is off the fabric; the subscription goes
            # nowhere and recv() blocks for ever (shm_broadcast.py:344).
            time.sleep(1.0)
        while True:
            try:
                conn = connect((ip, port), None, 5.0)
                send_json(conn, {"ready": self.rank})
                conn.settimeout(None)
                recv_json(conn)
                conn.close()
                return
            except (OSError, ValueError):
                time.sleep(0.5)  # ZeroMQ reconnects until the writer answers

    # -- after loading: dist_barrier_after_load ----------------------------------------
    def barrier_after_load(self) -> None:
        """The monitored barrier over the TP group (load_model_utils.py:315), on the links."""
        if self.nnodes == 1:
            return
        limit = float(UNBALANCED_MODEL_LOADING_TIMEOUT_S)
        seq = 0xB0
        try:
            if self.rank == 0:
                for link in self.links.values():
                    link.settimeout(limit)
                    link.sendall(frame(OP_PING, seq))
                for link in self.links.values():
                    recv_exact(link, FRAME_SIZE)
            else:
                link = self.links[0]
                link.settimeout(limit)
                _, _op, got, _, _ = unframe(recv_exact(link, FRAME_SIZE))
                link.sendall(frame(OP_REPLY, got))
        except OSError:
            raise ValueError(r.UNBALANCED_LOADING(tp_rank=self.tp)) from None
        for link in self.links.values():
            link.settimeout(None)

    def close_listeners(self) -> None:
        for srv in self.listeners.values():
            srv.close()
        self.listeners.clear()
