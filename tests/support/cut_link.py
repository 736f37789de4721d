"""A TCP relay on 127.0.0.1 that cuts the first replies it relays short: a connection to an object
store dropped mid-body, as a flaky network drops one, or (``stall``) left open with nothing more
sent, as a hung server or a dead route leaves one."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class CutLink:
    """Relays connections to ``target`` (host, port); the first ``cuts`` of them are closed after
    ``after`` bytes of the reply (``stall``: held open, silent, until the link closes)."""

    def __init__(self, target: tuple[str, int], cuts: int, after: int, stall: bool = False) -> None:
        self.target, self.cuts, self.after, self.stall = target, cuts, after, stall
        self.closed = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.cut = 0
        self._lock = threading.Lock()

    def serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed: the test is over
                return
            with self._lock:
                self.connections += 1
                limit = self.after if self.connections <= self.cuts else None
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, limit), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, limit: int | None) -> None:
        sent = 0
        try:
            while chunk := source.recv(1 << 16):
                if limit is not None and sent + len(chunk) >= limit:
                    sink.sendall(chunk[: limit - sent])
                    with self._lock:
                        self.cut += 1
                    if self.stall:
                        self.closed.wait()
                    break
                sink.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            end.close()


@contextmanager
def cut_link(target: tuple[str, int], cuts: int = 1, after: int = 1 << 20, stall: bool = False) -> Iterator[CutLink]:
    """A running ``CutLink`` to ``target``; closed when the block ends."""
    link = CutLink(target, cuts, after, stall)
    thread = threading.Thread(target=link.serve, daemon=True)
    thread.start()
    try:
        yield link
    finally:
        link.closed.set()
        try:
            link.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept; closing alone does not
        except OSError:
            pass
        link.listener.close()
        thread.join(10)
