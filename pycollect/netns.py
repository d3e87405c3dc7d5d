"""Hosts on one machine: Linux network namespaces behind a bridge, each link rate-limited.

    with netns.Hosts(3, rate="1gbit") as hosts:     # needs root and iproute2 (see unavailable())
        hosts.names[i], hosts.addrs[i]              # host i: namespace name, address 10.77.0.<i+1>
        hosts.argv(i, ["python", "job.py"])         # a command line that runs on host i
        hosts.set_link(i, up=False)                 # pull host i's cable at the switch (up=True mends it)
    netns.enter(name)                               # move the calling thread onto a host
    netns.run_in(name, fn, *args)                   # fn(*args) on a thread on that host

The layout is a small switched LAN: a "switch" namespace holds a bridge; each host is a
namespace with loopback and `eth0`, one end of a veth pair whose other end is a bridge
port. `tc tbf` on both ends limits each direction of each host's cable to `rate`, so a
host sends and receives at the line rate at once (full duplex) and hosts sending to one
host share its cable. The root namespace is never touched and the addresses exist only
inside these namespaces.

Every name carries this process's id and a sequence number, so parallel runs never
collide; close() (also on an exception or Ctrl-C, and at exit) deletes every namespace,
which takes the veths and the bridge with it. Namespaces left by a run that was killed
outright are deleted by the next Hosts() once their process is gone.
"""
from __future__ import annotations

import atexit
import ctypes
import itertools
import os
import re
import shutil
import signal
import subprocess
import threading
from typing import Callable, List, Optional, Sequence

IFNAME = "eth0"  # each host's one interface
SUBNET = "10.77.0"  # host i is SUBNET.<i+1>/24, inside the namespaces only
_PREFIX = "pcn"
_STALE = re.compile(rf"^{_PREFIX}(\d+)x\d+-")
_seq = itertools.count()
_CLONE_NEWNET = 0x40000000
_SI = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(|k|m|g|t)(bit|bps)\s*$", re.IGNORECASE)


def rate_bytes(rate: str) -> float:
    """tc's rate syntax ('1gbit', '100mbit', '10mbps'; SI prefixes; bps is bytes) in bytes per second."""
    m = _RATE.match(rate)
    if not m:
        raise ValueError(f"cannot read rate {rate!r}: use tc's syntax, e.g. 1gbit, 100mbit, 10mbps")
    value = float(m.group(1)) * _SI[m.group(2).lower()]
    value = value / 8 if m.group(3).lower() == "bit" else value
    if value <= 0:
        raise ValueError(f"rate {rate!r} must be positive")
    return value


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed: {r.stderr.strip() or r.returncode}")
    return r


def _namespaces() -> List[str]:
    return [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()]


def check_placement(hosts: int, ranks_per_host: int, line_rate: str) -> int:
    """The ranks a benchmark's host flags place (--netns-hosts H, --ranks-per-host G,
    --line-rate R): H x G, or 0 without hosts. ValueError naming the flag for a G below 1,
    G without H, a rate tc cannot read, or hosts that cannot be built here."""
    if not hosts:
        if ranks_per_host != 1:
            raise ValueError("--ranks-per-host places ranks on namespace hosts: add --netns-hosts H")
        return 0
    if hosts < 1 or ranks_per_host < 1:
        raise ValueError(f"--netns-hosts and --ranks-per-host must be >= 1, got {hosts} and {ranks_per_host}")
    try:
        rate_bytes(line_rate)
    except ValueError as e:
        raise ValueError(f"--line-rate: {e}") from None
    reason = unavailable()
    if reason:
        raise ValueError(f"--netns-hosts: namespace hosts cannot be built here: {reason}")
    return hosts * ranks_per_host


def unavailable() -> Optional[str]:
    """Why namespace hosts cannot be built here, or None when they can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs and tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"iproute2's `{tool}` is not installed"
    probe = f"{_PREFIX}{os.getpid()}x{next(_seq)}-probe"
    try:
        made = _ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"`ip netns add` is not usable here: {made.stderr.strip()}"
        _ip("-n", probe, "link", "set", "lo", "up")
        tbf = subprocess.run(["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1mbit",
                              "burst", "32kb", "latency", "50ms"], capture_output=True, text=True)
        if tbf.returncode != 0:
            return f"`tc qdisc ... tbf` is not usable here: {tbf.stderr.strip()}"
        return None
    finally:
        _ip("netns", "del", probe, check=False)


def _sweep_stale() -> None:
    """Delete namespaces a killed run of this module left behind (its process is gone)."""
    for name in _namespaces():
        m = _STALE.match(name)
        if m and int(m.group(1)) != os.getpid() and not os.path.exists(f"/proc/{m.group(1)}"):
            _ip("netns", "del", name, check=False)


def enter(name: str) -> None:
    """Move the calling thread (and the threads it starts later) into namespace `name`, and
    point Gloo at the host's interface, as on a real host with several NICs. Call it before
    any socket or thread that must live on the host is made."""
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if hasattr(os, "setns"):  # Python 3.12+
            os.setns(fd, os.CLONE_NEWNET)
        elif ctypes.CDLL(None, use_errno=True).setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into network namespace {name!r}: {os.strerror(err)}")
    finally:
        os.close(fd)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", IFNAME)


def run_in(name: str, fn: Callable, *args):
    """fn(*args) on a short-lived thread inside namespace `name` (the caller's own stays put)."""
    out: dict = {}

    def body():
        try:
            enter(name)
            out["value"] = fn(*args)
        except BaseException as e:  # handed to the caller
            out["error"] = e

    th = threading.Thread(target=body, name=f"netns-{name}")
    th.start()
    th.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


class Hosts:
    """`n` hosts on a switch; see the module docstring. Use as a context manager."""

    def __init__(self, n: int, rate: str = "1gbit", burst: Optional[str] = None, latency: str = "50ms"):
        if not 1 <= n <= 250:
            raise ValueError(f"need 1 to 250 hosts, got {n}")
        self.rate = rate
        self.rate_bytes = rate_bytes(rate)
        # The bucket: at least two GSO packets (64 KiB each), else 1 ms of line rate
        # (tc-tbf(8) asks for rate / HZ, a rule from tick-based timers; measured here, a
        # 1 ms bucket still carries the line rate). A 4 ms bucket let a third to a half
        # of a 1 MiB message through at memory speed (the model was 30-100 % too slow
        # there); with 1 ms, `pycollect model --validate --netns-hosts` has its 1 MiB
        # points within 15 % and 16 MiB still runs at the line rate.
        self.burst = burst or f"{max(128 * 1024, int(self.rate_bytes * 0.001))}b"
        self.latency = latency
        tag = f"{_PREFIX}{os.getpid()}x{next(_seq)}"
        self.switch = f"{tag}-sw"
        self.names = [f"{tag}-h{i}" for i in range(n)]
        self.addrs = [f"{SUBNET}.{i + 1}" for i in range(n)]
        self._made: List[str] = []
        _sweep_stale()
        atexit.register(self.close)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def port(self, i: int) -> str:
        """Host i's bridge port in the switch namespace (the switch end of its cable)."""
        return f"port{i}"

    def _tbf(self, ns: str, dev: str) -> None:
        r = subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", self.rate,
                            "burst", self.burst, "latency", self.latency], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"tc tbf on {ns}/{dev} failed: {r.stderr.strip()}")

    def _build(self) -> None:
        _ip("netns", "add", self.switch)
        self._made.append(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, (name, addr) in enumerate(zip(self.names, self.addrs)):
            _ip("netns", "add", name)
            self._made.append(name)
            _ip("-n", self.switch, "link", "add", self.port(i), "type", "veth", "peer", "name", IFNAME,
                "netns", name)
            _ip("-n", self.switch, "link", "set", self.port(i), "master", "br0", "up")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "addr", "add", f"{addr}/24", "dev", IFNAME)
            _ip("-n", name, "link", "set", IFNAME, "up")
            self._tbf(name, IFNAME)  # host -> switch
            self._tbf(self.switch, self.port(i))  # switch -> host

    def argv(self, i: int, argv: Sequence[str]) -> List[str]:
        """A command line that runs `argv` on host i (tagged as that host: namespaces share
        the machine's boot id and IPC namespace, and must not share memory)."""
        return ["ip", "netns", "exec", self.names[i], "env", f"PYCOLLECT_HOST_TAG={self.names[i]}", *argv]

    def placement(self, world_size: int, ranks_per_host: int = 1) -> dict:
        """run_ranks' keywords that put `world_size` ranks on these hosts, `ranks_per_host`
        consecutive ranks a host, the store on host 0."""
        return {"netns": [self.names[r // ranks_per_host] for r in range(world_size)], "master_addr": self.addrs[0]}

    def set_link(self, i: int, up: bool) -> None:
        """Plug (up=True) or pull (up=False) host i's cable at the switch: no FIN, no RST,
        packets simply stop, as with a cut cable or a dead switch port."""
        _ip("-n", self.switch, "link", "set", self.port(i), "up" if up else "down")

    def close(self) -> None:
        """Delete every namespace made (idempotent). Processes still on a host are killed
        first: a namespace outlives `ip netns del` while a process holds it."""
        made, self._made = self._made, []
        for name in reversed(made):
            pids = _ip("netns", "pids", name, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            _ip("netns", "del", name, check=False)
        atexit.unregister(self.close)

    def __enter__(self) -> "Hosts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
