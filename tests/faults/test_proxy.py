"""The fault harness's link proxy on its own: it forwards both ways, a cut holds bytes (and
new connections) until the heal releases them, and closing it leaves no socket open and
nothing for the garbage collector to warn about (pytest turns warnings into errors here)."""

from __future__ import annotations

import contextlib
import gc
import os
import socket
import threading
import time
import warnings
from collections.abc import Iterator

import pytest

from tidelog.testing.faults.proxy import LinkProxy, ProxyLoop


class Target:
    """A loopback server behind the proxy: echoes what it receives, records it, and can
    push bytes to every connection of its own accord."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port: int = self.sock.getsockname()[1]
        self.received = bytearray()
        self.conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept_loop, daemon=True)]
        self._threads[0].start()

    @property
    def accepted(self) -> int:
        with self._lock:
            return len(self.conns)

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(0.05)
            with self._lock:
                self.conns.append(conn)
            thread = threading.Thread(target=self._echo, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _echo(self, conn: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                data = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            with self._lock:
                self.received += data
            with contextlib.suppress(OSError):
                conn.sendall(data)

    def push(self, data: bytes) -> None:
        with self._lock:
            for conn in self.conns:
                conn.sendall(data)

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5.0)
        self.sock.close()
        for conn in self.conns:
            conn.close()


def recv_exactly(sock: socket.socket, n: int, timeout_s: float = 5.0) -> bytes:
    sock.settimeout(timeout_s)
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def nothing_arrives(sock: socket.socket, within_s: float = 0.5) -> bool:
    sock.settimeout(within_s)
    try:
        sock.recv(1)
    except TimeoutError:
        return True
    return False


@pytest.fixture
def link() -> Iterator[tuple[Target, LinkProxy]]:
    target = Target()
    loop = ProxyLoop()
    proxy = LinkProxy(loop, target.port, "test")
    try:
        yield target, proxy
    finally:
        proxy.close()
        loop.close()
        target.close()


def test_forwards_both_ways(link: tuple[Target, LinkProxy]) -> None:
    target, proxy = link
    payload = os.urandom(1 << 20)  # more than one read chunk
    with socket.create_connection(("127.0.0.1", proxy.port)) as client:
        client.sendall(b"ping")
        assert recv_exactly(client, 4) == b"ping"
        client.sendall(payload)
        assert recv_exactly(client, len(payload)) == payload
        target.push(b"pushed")
        assert recv_exactly(client, 6) == b"pushed"
    assert bytes(target.received) == b"ping" + payload
    assert target.accepted == 1


def test_cut_holds_bytes_and_new_connections_and_heal_releases_them(
    link: tuple[Target, LinkProxy],
) -> None:
    target, proxy = link
    with (
        socket.create_connection(("127.0.0.1", proxy.port)) as client,
        socket.create_connection(("127.0.0.1", proxy.port)) as later,
    ):
        client.sendall(b"before")
        assert recv_exactly(client, 6) == b"before"
        later.close()  # a connection that ends before the cut is simply gone
        proxy.cut()
        assert proxy.is_cut
        # Client -> target: held.
        client.sendall(b"held")
        assert nothing_arrives(client)
        assert bytes(target.received) == b"before"
        # Target -> client: held.
        target.push(b"pushed")
        assert nothing_arrives(client)
        # A new connection is accepted by the proxy but not carried to the target.
        accepted = target.accepted
        with socket.create_connection(("127.0.0.1", proxy.port)) as during:
            during.sendall(b"new")
            assert nothing_arrives(during)
            assert target.accepted == accepted
            proxy.heal()
            assert recv_exactly(client, 10) == b"pushedheld"
            assert recv_exactly(during, 3) == b"new"
        assert target.accepted == accepted + 1
    assert bytes(target.received).count(b"held") == 1


def open_fds() -> dict[int, str]:
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
    return fds


def test_close_while_cut_closes_every_socket_and_warns_nothing() -> None:
    gc.collect()
    before = open_fds()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target = Target()
        loop = ProxyLoop()
        proxies = [LinkProxy(loop, target.port, f"p{i}") for i in range(2)]
        clients = [socket.create_connection(("127.0.0.1", p.port)) for p in proxies]
        for client in clients:
            client.sendall(b"x")
            assert recv_exactly(client, 1) == b"x"
        for proxy in proxies:
            proxy.cut()
        # Bytes held in both directions, and connections accepted but never carried.
        for client in clients:
            client.sendall(b"held")
        target.push(b"held too")
        waiting = [socket.create_connection(("127.0.0.1", p.port)) for p in proxies]
        time.sleep(0.2)
        proxies[0].close()  # one proxy closed on its own, the other by the loop's close
        loop.close()
        # Every connection the proxies carried or held has been ended.
        for sock in clients + waiting:
            sock.settimeout(5.0)
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(100) == b""
        for sock in clients + waiting:
            sock.close()
        target.close()
        gc.collect()
    leaked = {fd: what for fd, what in open_fds().items() if fd not in before}
    assert leaked == {}
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
