"""Ports for the servers tests start (Hubs, proxies, Jupyter servers, users' servers, emulators),
drawn from below the ephemeral port range.

A port picked by binding port 0 comes from the ephemeral range (32768 and up on Linux), which
serves every outgoing connection and every other port-0 pick, each kernel's five ports among them:
between the pick and the server's own bind another process could get it (a kernel's ZMQ socket
once answered on a user's server port, and the Hub waited four minutes for a server that had
failed to start). No port below that range is handed out unasked, so only another draw of the
tests' could take one, and a draw among ten thousand, checked free, makes that rare. A process
never hands out the same port twice: a Hub's ports and its services' are all drawn before any of
them is bound, and two of its services once got the same one. A port bound only long after its
draw (a Hub service the test starts itself, minutes later) is held (``Held``) until then: a
Hub's own draws for its users' servers, in another process, once gave one of them the port of
a service not yet started, and the proxy sent that service's page to the user's server.
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
#: The ports this process has handed out.
_given: set[int] = set()


def bindable(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a TCP socket could bind ``port`` on ``host`` now."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nobody listens on now and that this process has not handed out
    before, from ``PORT_RANGE``."""
    for _ in range(DRAWS):
        port = _draw.randrange(*PORT_RANGE)
        if port not in _given and bindable(port, host):
            _given.add(port)
            return port
    raise RuntimeError(f"no free port on {host} in {DRAWS} draws from {PORT_RANGE}")


class Held:
    """A port drawn and kept bound (not listening) until its server is about to bind it: every
    process's draw finds it taken (``bindable``) meanwhile."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        for _ in range(DRAWS):
            port = free_port(host)
            sock = socket.socket()
            try:
                sock.bind((host, port))
            except OSError:  # taken between the draw's check and this bind
                sock.close()
                continue
            self.port, self._socket = port, sock
            return
        raise RuntimeError(f"no port on {host} could be held in {DRAWS} draws from {PORT_RANGE}")

    def release(self) -> None:
        """Let the port go: its server binds it next."""
        self._socket.close()
