"""Refuse network connections to anything but loopback (used by tests and offline runs).

``install()`` wraps ``socket.socket.connect`` so that a connection to a
non-loopback address raises ``ConnectionRefusedError`` naming the address.
The kernel's own loopback traffic (ZeroMQ) is unaffected. ``memlab`` calls it
on import when ``MEMLAB_OFFLINE=1``.
"""
from __future__ import annotations

import ipaddress
import socket

_original_connect = socket.socket.connect
_original_connect_ex = socket.socket.connect_ex


def _is_local(address) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path
        return True
    host = address[0] if isinstance(address, tuple) and address else address
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost would need DNS, i.e. the network


def _guarded(original):
    def connect(self, address):
        if not _is_local(address):
            raise ConnectionRefusedError(f"memlab offline mode: connection to {address!r} refused (loopback only)")
        return original(self, address)

    return connect


def install() -> None:
    """Allow only loopback and Unix-socket connections in this process."""
    socket.socket.connect = _guarded(_original_connect)
    socket.socket.connect_ex = _guarded(_original_connect_ex)


def uninstall() -> None:
    socket.socket.connect = _original_connect
    socket.socket.connect_ex = _original_connect_ex
