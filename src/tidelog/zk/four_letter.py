"""What each member of a ZooKeeper ensemble says it is: the ``srvr`` four-letter word.

Theory of operation:

1. A connect string ``h1:p1,h2:p2/chroot`` names the members (``members``); a member
   without a port is at ZooKeeper's 2181, an IPv6 address is written ``[::1]:2181``.
2. ``srvr`` is sent on a plain socket to a member's client port; the answer's ``Mode:``
   line is its role (``leader``, ``follower``, ``observer``, ``standalone``, ``read-only``).
3. A member that refuses or drops the connection, or answers ``This ZooKeeper instance is
   not currently serving requests`` (it is not in a quorum), is not serving.
4. A member whose ``4lw.commands.whitelist`` leaves ``srvr`` out answers ``srvr is not
   executed because it is not in the whitelist.``: its mode is unknown, and whether it
   serves is then learned by opening a real session to it alone (``probe_session``).

``srvr`` needs no authentication; a member reachable only over TLS (``secureClientPort``)
does not answer it on its plain port, and is reported as not serving there.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Final

from tidelog.zk.session import probe_session, split_connect_string

#: ZooKeeper's default client port (a member named without one).
DEFAULT_CLIENT_PORT: Final = 2181
#: Rule 3: what a member outside a quorum answers instead of its state.
NOT_SERVING_ANSWER: Final = "This ZooKeeper instance is not currently serving requests"
#: Rule 4: what a member answers for a four-letter word its whitelist leaves out.
NOT_WHITELISTED_ANSWER: Final = "is not executed because it is not in the whitelist"


@dataclass(frozen=True, slots=True)
class MemberState:
    """One member as ``srvr`` (and, for rule 4, a session) found it."""

    host: str
    port: int
    #: Its ``Mode:`` (rule 2); None when it did not say.
    mode: str | None
    #: Whether it serves clients; None when neither ``srvr`` nor a session could tell.
    serving: bool | None
    #: Why it is not serving or its mode is unknown ("" when it answered a mode).
    detail: str = ""

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def members(connect: str) -> list[tuple[str, int]]:
    """Rule 1: the (host, port) of every member of ``connect``; ValueError naming a bad one."""
    hosts, _chroot = split_connect_string(connect.strip())
    result = []
    for raw in hosts.split(","):
        item = raw.strip()
        if item.startswith("["):
            host, bracket, rest = item[1:].partition("]")
            if not bracket or (rest and not rest.startswith(":")):
                raise ValueError(f"ZooKeeper member {item!r} is not [IPv6]:PORT")
            port_text = rest[1:]
        elif item.count(":") > 1:
            raise ValueError(f"ZooKeeper member {item!r}: write an IPv6 address as [ADDR]:PORT")
        else:
            host, _sep, port_text = item.partition(":")
        if not host:
            raise ValueError(f"ZooKeeper member {item!r} has no host")
        if port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536):
            raise ValueError(f"ZooKeeper member {item!r} has no valid port")
        result.append((host, int(port_text) if port_text else DEFAULT_CLIENT_PORT))
    return result


def parse_srvr(host: str, port: int, answer: str) -> MemberState:
    """Rules 2-4 on the text a member answered to ``srvr`` (pure)."""
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return MemberState(host, port, line.partition(":")[2].strip(), True)
    if NOT_SERVING_ANSWER in answer:
        return MemberState(host, port, None, False, "not in a quorum")
    if NOT_WHITELISTED_ANSWER in answer:
        return MemberState(host, port, None, None, "srvr is not in its 4lw.commands.whitelist")
    if not answer.strip():
        return MemberState(host, port, None, None, "closed the connection without an answer")
    return MemberState(host, port, None, None, "answered srvr without a Mode line")


def read_srvr(host: str, port: int, timeout_s: float) -> str | OSError:
    """The member's whole answer to ``srvr``, or the socket error."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(b"srvr")
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    except OSError as exc:
        return exc
    return b"".join(chunks).decode(errors="replace")


def member_state(host: str, port: int, timeout_s: float = 2.0) -> MemberState:
    """Rules 2-4 for one member (blocking, at most about twice ``timeout_s``)."""
    answer = read_srvr(host, port, timeout_s)
    if isinstance(answer, OSError):
        reason = "timed out" if isinstance(answer, TimeoutError) else answer.strerror
        return MemberState(host, port, None, False, str(reason or answer))
    state = parse_srvr(host, port, answer)
    if state.serving is None:
        address = state.address
        serving = probe_session(address, timeout_s=timeout_s)
        detail = state.detail + ("" if serving else "; no session could be opened")
        return MemberState(host, port, None, serving, detail)
    return state


def srvr_mode(host: str, port: int, timeout_s: float = 2.0) -> str | None:
    """``leader``, ``follower`` or ``standalone`` from ``srvr``; None when the member does not
    say (not running, not in a quorum, or ``srvr`` not whitelisted)."""
    answer = read_srvr(host, port, timeout_s)
    if isinstance(answer, OSError):
        return None
    return parse_srvr(host, port, answer).mode
