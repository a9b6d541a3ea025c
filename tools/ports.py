"""Local TCP ports: is one taken, which are free. Below every launcher (Triton, the gateway,
the servers a benchmark compares with) so each checks its port the same way before it starts."""

from __future__ import annotations

import errno
import socket


def port_in_use(host: str, port: int) -> bool:
    """True when something already listens on host:port (TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Ports the OS reports free right now (for tests and side-by-side servers)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
