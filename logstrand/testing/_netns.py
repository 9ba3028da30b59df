"""Separate hosts on one machine, for tests: Linux network namespaces on a
bridge (needs root and iproute2; partitions need iptables).

    with Network(tmp_dir, ["zk", "n1", "n2", "n3"]) as net:
        proc = net.spawn("n1", ["logstrand", "node", "--config", "n1.toml"], log)
        net.partition(["n1"], ["n2", "n3", "zk"])   # DROP between the sides
        net.heal()

Each host is a namespace with its loopback up and one end of a veth pair,
addressed ``10.A.B.i/24``; the other end joins a bridge in the root
namespace, which holds ``10.A.B.1``, so that the test (a client in the root
namespace) reaches every host at its own address.  The subnet is drawn
among those that no route of the root namespace touches, and the
namespaces have no default route: nothing leaves the machine, and nothing
outside the namespaces this harness made is contacted.

Partitions are iptables DROP rules inside the namespaces, in both
directions (slow links: ``_delay_proxy``, set up by ``NetCluster``).
``close`` stops every process spawned, then deletes the veths, the
namespaces and the bridge, also when a test failed; a harness that died
without closing is cleaned by ``remove_stale`` (names carry the owner's pid).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from ._procs import Process

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

#: Namespaces and links of this harness start with this (and the owner's pid).
PREFIX = "lsn"


def available() -> str | None:
    """None when namespaces can be made here, else why not (a skip reason)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 ('ip') is not installed"
    return None


def partitions_available() -> str | None:
    """None when partitions can be made here, else why not."""
    why = available()
    if why is None and shutil.which("iptables") is None:
        why = "iptables is not installed (make test installs the Debian package)"
    return why


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=30)


def remove_stale() -> list[str]:
    """Delete namespaces and bridges of harnesses whose process is gone."""
    removed = []
    out = _run("ip", "netns", "list", check=False).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(rf"{PREFIX}(\d+)[a-z]\d+", name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            _run("ip", "netns", "del", name, check=False)
            removed.append(name)
    out = _run("ip", "-o", "link", "show", "type", "bridge", check=False).stdout
    for name in re.findall(rf"\d+: ({PREFIX}(\d+)b[a-z])[:@]", out):
        if not Path(f"/proc/{name[1]}").exists():
            _run("ip", "link", "del", name[0], check=False)
            removed.append(name[0])
    return removed


def _free_subnet(rng: random.Random) -> str:
    """``10.A.B`` that no route or address of the root namespace touches."""
    taken = _run("ip", "-4", "route", "show", "table", "all", check=False).stdout
    taken += _run("ip", "-4", "addr", "show", check=False).stdout
    for _ in range(200):
        a, b = rng.randrange(200, 250), rng.randrange(0, 256)
        if f"10.{a}.{b}." not in taken and f"10.{a}.0.0/16" not in taken:
            return f"10.{a}.{b}"
    raise RuntimeError("no free 10.x.y.0/24 subnet found")


@attrs.define
class Host:
    name: str
    namespace: str
    address: str  # its one IPv4 address
    veth: str  # the end in the root namespace


@attrs.define(eq=False)
class Network:
    directory: Path = attrs.field(converter=Path)
    names: Sequence[str] = ()
    hosts: dict[str, Host] = attrs.field(init=False, factory=dict)
    subnet: str = attrs.field(init=False, default="")
    bridge: str = attrs.field(init=False, default="")
    procs: list[Process] = attrs.field(init=False, factory=list)
    _tag: str = attrs.field(init=False, default="")
    _rules: list[tuple[str, list[str]]] = attrs.field(init=False, factory=list)

    def __attrs_post_init__(self) -> None:
        why = available()
        if why is not None:
            raise RuntimeError(why)
        self.directory.mkdir(parents=True, exist_ok=True)

    # -- making and removing -------------------------------------------------

    def __enter__(self) -> Network:
        try:
            self.open()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        remove_stale()
        rng = random.Random()
        # The letter tells harnesses of one process apart (a module's shared
        # network and a test's own): one that no bridge of this process has.
        bridges = _run("ip", "-o", "link", "show", "type", "bridge", check=False).stdout
        mine = f"{PREFIX}{os.getpid()}b"
        free = [c for c in "abcdefghijklmnopqrstuvwxyz" if f" {mine}{c}:" not in bridges]
        if not free:
            raise RuntimeError(f"26 networks of process {os.getpid()} are open")
        self._tag = f"{PREFIX}{os.getpid()}{rng.choice(free)}"
        self.subnet = _free_subnet(rng)
        self.bridge = f"{PREFIX}{os.getpid()}b{self._tag[-1]}"
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for name in self.names:
            self.add_host(name)

    def add_host(self, name: str) -> Host:
        i = len(self.hosts) + 10
        ns = f"{self._tag}{i}"
        veth, peer = f"{self._tag}v{i}", f"{self._tag}p{i}"  # at most 15 characters
        _run("ip", "netns", "add", ns)
        host = Host(name, ns, f"{self.subnet}.{i}", veth)
        self.hosts[name] = host
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", peer)
        _run("ip", "link", "set", peer, "netns", ns)
        _run("ip", "link", "set", veth, "master", self.bridge)
        _run("ip", "link", "set", veth, "up")
        self.ip(name, "link", "set", "lo", "up")
        self.ip(name, "addr", "add", f"{host.address}/24", "dev", peer)
        self.ip(name, "link", "set", peer, "up")
        return host

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop(15.0)
        self.procs.clear()
        for host in self.hosts.values():
            # The pair goes with its namespace, but only once the kernel has
            # destroyed the namespace, later: delete it now.
            _run("ip", "link", "del", host.veth, check=False)
            _run("ip", "netns", "del", host.namespace, check=False)
        self.hosts.clear()
        if self.bridge:
            _run("ip", "link", "del", self.bridge, check=False)
            self.bridge = ""

    # -- running things on a host --------------------------------------------

    def address(self, name: str) -> str:
        return self.hosts[name].address

    def ip(self, name: str, *args: str) -> None:
        _run("ip", "-n", self.hosts[name].namespace, *args)

    def run(self, name: str, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run a command on a host and wait for it (it must succeed)."""
        return _run("ip", "netns", "exec", self.hosts[name].namespace, *argv)

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        log: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Process:
        """Start a process on a host; ``close`` stops it if the test did not."""
        proc = Process(["ip", "netns", "exec", self.hosts[name].namespace, *argv], log, env=env)
        self.procs.append(proc)
        return proc

    # -- faults ----------------------------------------------------------------

    def partition(self, side: Iterable[str], other: Iterable[str]) -> None:
        """Drop every packet between the hosts of ``side`` and those of ``other``
        (the name ``"client"`` stands for the root namespace: the test)."""
        others = list(other)
        for a in side:
            for b in others:
                self._drop(a, b)
                self._drop(b, a)

    def isolate(self, name: str, *, from_clients: bool = False) -> None:
        """Cut ``name`` off from every other host (and the test's clients too)."""
        rest = [h for h in self.hosts if h != name]
        self.partition([name], [*rest, "client"] if from_clients else rest)

    def _drop(self, a: str, b: str) -> None:
        if a == "client":
            return  # rules go into the hosts' namespaces only
        peer = f"{self.subnet}.1" if b == "client" else self.hosts[b].address
        for rule in (["INPUT", "-s", peer], ["OUTPUT", "-d", peer]):
            argv = ["iptables", "-w", "-I", *rule, "-j", "DROP"]
            self.run(a, argv)
            self._rules.append((a, rule))

    def heal(self) -> None:
        """Remove every DROP rule."""
        for name, rule in self._rules:
            if name in self.hosts:
                with contextlib.suppress(subprocess.CalledProcessError):
                    self.run(name, ["iptables", "-w", "-D", *rule, "-j", "DROP"])
        self._rules.clear()
