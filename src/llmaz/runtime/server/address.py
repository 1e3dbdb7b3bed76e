"""Bind addresses of the manager's servers: `host:port` (IPv6 in brackets) and the sockets they name.

Invariants:
- `split_host_port` reads addresses as Go's `net.SplitHostPort` does: `:8081`, `127.0.0.1:8081`,
  `[::1]:8081`, `[::]:9443`, `localhost:8081`; an IPv6 host must be bracketed (`::1:8081` is refused).
- An empty host, `::` and `[::]` mean every interface, IPv4 and IPv6, on one dual-stack socket (so one port,
  also for port 0); where the kernel has no IPv6, IPv4 only. `0.0.0.0` means IPv4 only, `::1` IPv6 only.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

ALL_INTERFACES = ("", "::")


def split_host_port(address: str) -> tuple[str, int]:
    """(host, port) of `address`; the host is unbracketed and "" when omitted. ValueError if malformed."""
    if address.startswith("["):
        host, sep, rest = address[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"address {address!r}: expected [host]:port")
        port = rest[1:]
    else:
        host, sep, port = address.rpartition(":")
        if not sep:
            raise ValueError(f"address {address!r}: missing port")
        if ":" in host:
            raise ValueError(f"address {address!r}: an IPv6 host must be in brackets, e.g. [::1]:8081")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"address {address!r}: port must be a number from 0 to 65535")
    return host, int(port)


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_socket(host: str, port: int) -> socket.socket:
    """A bound, non-blocking TCP socket; `host` "" or "::" binds every interface (see the module invariants)."""
    host = host.removeprefix("[").removesuffix("]")
    if host in ALL_INTERFACES:
        return _bind_all(port)
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        _bind(sock, address)
    except BaseException:
        sock.close()
        raise
    return sock


# What binding "::" fails with where this kernel or network namespace has no IPv6.
_NO_IPV6 = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT)


def _bind_all(port: int) -> socket.socket:
    if socket.has_ipv6:
        try:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        except OSError as exc:
            if exc.errno not in _NO_IPV6:
                raise
        else:
            try:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                _bind(sock, ("::", port))
            except OSError as exc:
                sock.close()
                if exc.errno not in _NO_IPV6:
                    raise
            else:
                return sock
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        _bind(sock, ("0.0.0.0", port))
    except BaseException:
        sock.close()
        raise
    return sock


def _bind(sock: socket.socket, address: Any) -> None:
    # As asyncio's create_server does: a restarted manager can listen again while old connections linger.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.setblocking(False)
