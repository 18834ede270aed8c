"""Refuse network traffic to anything but loopback (tests, offline runs, ``memlab run`` at smoke/cpu).

``install()`` adds a Python audit hook (:func:`sys.addaudithook`) that sees
every socket operation, including those made on ``_socket.socket`` directly,
and refuses, with ``ConnectionRefusedError`` naming the address:

- ``connect`` and ``connect_ex`` (TCP or UDP) to a non-loopback address;
- ``sendto`` and ``sendmsg`` (UDP datagrams) to a non-loopback address;
- name resolution (``getaddrinfo``, ``gethostbyname(_ex)``, ``gethostbyaddr``,
  ``getnameinfo``) of anything but loopback names, numeric addresses and this
  machine's own host name, so no DNS query leaves the machine.

The kernel's own loopback traffic (ZeroMQ) and Unix sockets are unaffected.
Code in C libraries that opens sockets without Python (none in memlab's
dependencies at the smoke/cpu profiles) is outside its reach. ``memlab``
calls ``install()`` on import when ``MEMLAB_OFFLINE=1``; ``memlab run`` sets
that at the smoke and cpu profiles unless ``--allow-download``.
"""
from __future__ import annotations

import ipaddress
import socket
import sys

_state = {"active": False, "hooked": False}
_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback", ""}


def _host_of(address):
    if isinstance(address, tuple) and address:
        return address[0]
    return address


def _is_local(address) -> bool:
    """Whether a socket address (or bare host) stays on this machine."""
    if isinstance(address, (bytes, bytearray)) or (isinstance(address, str) and "/" in address):
        return True  # AF_UNIX path (or abstract name)
    host = _host_of(address)
    if host is None:
        return True
    if isinstance(host, (bytes, bytearray)):
        host = host.decode(errors="replace")
    if not isinstance(host, str):
        return True  # AF_NETLINK and other non-IP families carry integers
    if host.lower() in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False  # a host name other than localhost would need DNS, i.e. the network


def _resolvable_offline(host) -> bool:
    """Names whose lookup needs no DNS query: loopback names, numeric addresses, our own host name."""
    if host is None:
        return True
    if isinstance(host, (bytes, bytearray)):
        host = host.decode(errors="replace")
    if not isinstance(host, str) or host.lower() in _LOCAL_NAMES:
        return True
    try:
        ipaddress.ip_address(host.split("%")[0])
        return True  # numeric: no lookup; a connect to it is checked on its own
    except ValueError:
        pass
    return host == socket.gethostname()


def _refuse(what: str, target) -> None:
    raise ConnectionRefusedError(f"memlab offline mode: {what} {target!r} refused (loopback only; "
                                 "memlab run --allow-download lets a run reach the network)")


def _hook(event: str, args) -> None:
    if not _state["active"] or not event.startswith("socket."):
        return
    if event == "socket.connect":
        if not _is_local(args[1]):
            _refuse("connection to", args[1])
    elif event in ("socket.sendto", "socket.sendmsg"):
        if args[1] is not None and not _is_local(args[1]):
            _refuse("datagram to", args[1])
    elif event in ("socket.getaddrinfo", "socket.gethostbyname"):
        if not _resolvable_offline(args[0]):
            _refuse("name lookup of", args[0])
    elif event in ("socket.gethostbyaddr", "socket.getnameinfo"):
        if not _is_local(args[0]):
            _refuse("reverse lookup of", args[0])


_original_connect = socket.socket.connect
_original_connect_ex = socket.socket.connect_ex


def _guarded(original):
    # Also at the Python level, so the refusal comes first even when another wrapper of
    # socket.socket.connect (pytest-socket) sits between the caller and the C call.
    def connect(self, address):
        if not _is_local(address):
            _refuse("connection to", address)
        return original(self, address)

    return connect


def install() -> None:
    """Allow only loopback and Unix-socket traffic and no DNS in this process (idempotent)."""
    if not _state["hooked"]:
        sys.addaudithook(_hook)  # audit hooks cannot be removed; uninstall() switches it off
        _state["hooked"] = True
    _state["active"] = True
    socket.socket.connect = _guarded(_original_connect)
    socket.socket.connect_ex = _guarded(_original_connect_ex)


def uninstall() -> None:
    """Switch the guard off again (tests)."""
    _state["active"] = False
    socket.socket.connect = _original_connect
    socket.socket.connect_ex = _original_connect_ex


def active() -> bool:
    return _state["active"]
