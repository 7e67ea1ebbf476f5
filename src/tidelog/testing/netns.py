"""Hosts on one machine: N Linux network namespaces joined by a bridge, built with ``ip``.

``HostNetwork(prefix, hosts=3, subnet=(77, 0))`` describes the hosts; ``create()`` makes them::

    root namespace:  bridge <prefix>br, address 10.<a>.<b>.254/24
    host i (1..N):   namespace <prefix>-h<i>, veth <prefix>v<i> (root side, on the bridge)
                     <-> <prefix>p<i> (inside, address 10.<a>.<b>.<i>/24, and lo up)

so a client in the root namespace reaches host i at ``address(i)`` and hosts reach each
other through the bridge. ``link_down(i)`` sets host i's root-side veth down: a real
partition (its packets go nowhere) until ``link_up(i)``.

Every ``ip`` command goes through a ``Runner`` (``run_ip`` by default; tests pass a fake), and
every namespace or link is recorded in ``made`` as soon as ``ip`` created it, so
``destroy()`` removes exactly what this object made, in reverse order, even after a failed
``create()``, and never anything else. ``prefix`` makes the names unique per run
(``unique_prefix()``); Linux limits an interface name to 15 characters.

Exceptions::

    TidelogError
     └── NetnsError      not root, ``ip`` missing, or an ``ip`` command failed
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, Self

from tidelog.errors import TidelogError

#: Runs one ``ip`` command line (argv without the ``ip`` itself); raises NetnsError on failure.
Runner = Callable[[Sequence[str]], None]

IFNAMSIZ: Final = 15
IP_TOOL: Final = "ip"
#: The root namespace's address on the bridge: 10.<a>.<b>.254.
BRIDGE_HOST: Final = 254


class NetnsError(TidelogError):
    """A namespace or link could not be made, changed or removed."""


def run_ip(argv: Sequence[str]) -> None:
    """Run ``ip ARGV...``; NetnsError with ip's own message when it fails."""
    ip = shutil.which(IP_TOOL) or shutil.which("/usr/sbin/ip")
    if ip is None:
        raise NetnsError("`ip` (iproute2) not found: hosts need network namespaces")
    proc = subprocess.run([ip, *argv], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip()
        raise NetnsError(f"`ip {' '.join(argv)}` failed: {message}")


def require_root() -> None:
    """NetnsError unless this process may make network namespaces (it runs as root)."""
    if os.geteuid() != 0:
        raise NetnsError("hosts need network namespaces, which need root (run as root)")


def unique_prefix() -> str:
    """A fresh name prefix ``tl`` + 5 hex digits, so parallel runs never collide."""
    return "tl" + secrets.token_hex(3)[:5]


@dataclass(frozen=True, slots=True)
class Made:
    """One thing ``create()`` made: ``kind`` is ``netns`` or ``link``."""

    kind: str
    name: str


@dataclass(slots=True)
class HostNetwork:
    """N namespaces on a bridge; see the module docstring. ``subnet`` = (a, b) of 10.a.b.0/24."""

    prefix: str
    hosts: int
    subnet: tuple[int, int] = (77, 0)
    runner: Runner = run_ip
    made: list[Made] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.hosts < 1 or self.hosts > 250:
            raise NetnsError(f"--hosts must be between 1 and 250, not {self.hosts}")
        if len(self.veth_peer(self.hosts)) > IFNAMSIZ:
            raise NetnsError(f"name prefix {self.prefix!r} is too long for interface names")

    # -- names and addresses ----------------------------------------------------------------

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    def namespace(self, host: int) -> str:
        return f"{self.prefix}-h{host}"

    def veth_root(self, host: int) -> str:
        return f"{self.prefix}v{host}"

    def veth_peer(self, host: int) -> str:
        return f"{self.prefix}p{host}"

    def address(self, host: int) -> str:
        """Host ``host``'s address (hosts count from 1)."""
        a, b = self.subnet
        return f"10.{a}.{b}.{host}"

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge."""
        return self.address(BRIDGE_HOST)

    def exec_prefix(self, host: int) -> list[str]:
        """Prefix of a command run inside host ``host``: ``ip netns exec`` execs it, so the
        PID of the started process is the command's own."""
        ip = shutil.which(IP_TOOL) or "/usr/sbin/ip"
        return [ip, "netns", "exec", self.namespace(host)]

    # -- commands ---------------------------------------------------------------------------

    def _run(self, *argv: str) -> None:
        self.runner(argv)

    def create(self) -> Self:
        """Make the bridge and the hosts; on failure, remove what was made and re-raise."""
        try:
            self._run("link", "add", self.bridge, "type", "bridge")
            self.made.append(Made("link", self.bridge))
            self._run("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            self._run("link", "set", self.bridge, "up")
            for host in range(1, self.hosts + 1):
                self._create_host(host)
        except BaseException:
            self.destroy()
            raise
        return self

    def _create_host(self, host: int) -> None:
        ns, root, peer = self.namespace(host), self.veth_root(host), self.veth_peer(host)
        self._run("netns", "add", ns)
        self.made.append(Made("netns", ns))
        self._run("link", "add", root, "type", "veth", "peer", "name", peer)
        # Deleting one end of a veth pair deletes both, wherever the peer now lives.
        self.made.append(Made("link", root))
        self._run("link", "set", peer, "netns", ns)
        self._run("link", "set", root, "master", self.bridge)
        self._run("link", "set", root, "up")
        self._run("-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", peer)
        self._run("-n", ns, "link", "set", peer, "up")
        self._run("-n", ns, "link", "set", "lo", "up")

    def link_down(self, host: int) -> None:
        """Cut host ``host`` off the bridge (a real partition)."""
        self._run("link", "set", self.veth_root(host), "down")

    def link_up(self, host: int) -> None:
        self._run("link", "set", self.veth_root(host), "up")

    def cut_from(self, host: int, others: Sequence[int]) -> None:
        """Cut host ``host`` off from each of ``others`` both ways, not from the root
        namespace: a ``blackhole`` /32 route to each other's address inside ``host``, and
        one to ``host``'s inside each other (more specific than the /24 on-link route, so
        the bridge and the gateway still carry everything else). ``heal_cut`` removes them.
        A send on a blackhole route fails inside the sender (connect: EINVAL), as behind a
        router that answers "unreachable"; the processes keep running."""
        for other in others:
            self._run(
                "-n", self.namespace(host), "route", "add", "blackhole", self._host_route(other)
            )
            self._run(
                "-n", self.namespace(other), "route", "add", "blackhole", self._host_route(host)
            )

    def heal_cut(self, host: int, others: Sequence[int]) -> list[str]:
        """Remove the routes ``cut_from(host, others)`` added; returns the errors (a route
        already gone), never raises, so every route is tried."""
        errors: list[str] = []
        for other in others:
            for inside, to in ((host, other), (other, host)):
                try:
                    self._run(
                        "-n",
                        self.namespace(inside),
                        "route",
                        "del",
                        "blackhole",
                        self._host_route(to),
                    )
                except NetnsError as exc:
                    errors.append(str(exc))
        return errors

    def _host_route(self, host: int) -> str:
        return f"{self.address(host)}/32"

    def destroy(self) -> list[str]:
        """Remove what this object made, newest first; returns the errors (never raises, so a
        teardown removes all it can)."""
        errors: list[str] = []
        while self.made:
            item = self.made.pop()
            argv = (
                ("netns", "del", item.name) if item.kind == "netns" else ("link", "del", item.name)
            )
            try:
                self.runner(argv)
            except NetnsError as exc:
                errors.append(str(exc))
        return errors

    def __enter__(self) -> Self:
        return self.create()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.destroy()


def subnet_users(ip_addr_output: str) -> dict[tuple[int, int], set[str]]:
    """For every 10.a.b.x/… address in ``ip -4 -o addr`` output, the interfaces holding one,
    by (a, b)."""
    users: dict[tuple[int, int], set[str]] = {}
    for line in ip_addr_output.splitlines():
        words = line.split()
        if len(words) < 4 or words[2] != "inet" or not words[3].startswith("10."):
            continue
        parts = words[3].split("/")[0].split(".")
        if len(parts) == 4 and parts[1].isdigit() and parts[2].isdigit():
            users.setdefault((int(parts[1]), int(parts[2])), set()).add(words[1])
    return users


def _ip_addresses() -> str:
    proc = subprocess.run(
        [shutil.which(IP_TOOL) or "/usr/sbin/ip", "-4", "-o", "addr"],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout


def free_subnet(first: int = 77) -> tuple[int, int]:
    """A 10.``first``.b.0/24 that no interface of the root namespace uses yet (the third
    octet picked at random among the free ones, so parallel runs rarely pick the same)."""
    used = subnet_users(_ip_addresses())
    free = [b for b in range(256) if (first, b) not in used]
    if not free:
        raise NetnsError(f"every 10.{first}.x.0/24 is in use")
    return first, secrets.choice(free)


def shares_subnet(network: HostNetwork) -> bool:
    """True when an interface other than ``network``'s bridge holds an address in its
    subnet: another run picked the same one at the same moment (``create()`` again with
    another subnet)."""
    holders = subnet_users(_ip_addresses()).get(network.subnet, set())
    return bool(holders - {network.bridge})


__all__ = [
    "HostNetwork",
    "Made",
    "NetnsError",
    "Runner",
    "free_subnet",
    "require_root",
    "run_ip",
    "shares_subnet",
    "subnet_users",
    "unique_prefix",
]
