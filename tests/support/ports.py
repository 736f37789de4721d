"""Ports for the servers tests start (Hubs, proxies, Jupyter servers, users' servers, emulators),
drawn from below the ephemeral port range.

A port picked by binding port 0 comes from the ephemeral range (32768 and up on Linux), which
serves every outgoing connection and every other port-0 pick, each kernel's five ports among them:
between the pick and the server's own bind another process could get it (a kernel's ZMQ socket
once answered on a user's server port, and the Hub waited four minutes for a server that had
failed to start). No port below that range is handed out unasked, so only another test drawing
the same port could take one, and a draw among ten thousand, checked free, makes that rare.
"""

from __future__ import annotations

import random
import socket

#: Where ports are drawn from: below the ephemeral range, and below SeaweedFS's pairs
#: (``PORT_RANGE`` of tests/support/s3_server.py).
PORT_RANGE = (10000, 20000)
#: Draws before giving up.
DRAWS = 200

_draw = random.SystemRandom()  # not the random module's: a test may seed that, alike in every test process


def bindable(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a TCP socket could bind ``port`` on ``host`` now."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nobody listens on now, from ``PORT_RANGE``."""
    for _ in range(DRAWS):
        if bindable(port := _draw.randrange(*PORT_RANGE), host):
            return port
    raise RuntimeError(f"no free port on {host} in {DRAWS} draws from {PORT_RANGE}")
