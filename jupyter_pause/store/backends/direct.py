"""Large S3 objects read straight into their buffer: presigned GETs over plain HTTP connections.

s3fs reads a body through aiohttp a chunk at a time, each chunk a new ``bytes`` joined into the
next, on its one event-loop thread: on two cores a 1 GB resume spent 2.7 CPU-seconds in the
client, more than the read's own wall time, and nothing was left to import torch beside it.
Here each object is signed by s3fs (``S3FileSystem.url``: the same credentials, endpoint and
region as every other request) and fetched with ``http.client``, whose ``readinto`` has the
socket write the bytes into the buffer the arrays will own: no chunk objects, no second copy,
the GIL released while the socket reads. The same 1 GB took 0.6 CPU-seconds and half the wall
time. A large object is fetched as ranged parts of ``REMOTE_BLOCK`` bytes at once. Over plain HTTP
(a store inside the cluster) each part's body is one ``recv`` that waits for all of it
(``MSG_WAITALL``): ``readinto`` returns every few hundred kilobytes and takes the GIL back each
time, which on two cores kept a torch import beside the reads waiting for it.

It is a faster road, never a different answer: whatever it cannot do as s3fs would (a proxy,
requester-pays, customer-provided encryption keys, a reply other than the whole range asked
for, a dropped connection twice) it hands back (``None``), and the caller reads through s3fs,
whose errors name the problem. The bytes are verified against the manifest as any read's are.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import struct
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..buffers import REMOTE_BLOCK, Buffer, buffer

#: Seconds a presigned URL stays valid: it is used at once, for one object.
EXPIRES = 900
#: Seconds without a byte before a connection is given up (and the read handed to s3fs).
TIMEOUT = 60.0
#: Tries of one range before the read is handed to s3fs.
ATTEMPTS = 2
#: Ranged parts of large objects in flight at once, across every read of this process.
PARTS = 8
#: Environment variables that route HTTP through a proxy (botocore honours them; this does not).
PROXIES = ("http_proxy", "https_proxy", "all_proxy")

_parts: ThreadPoolExecutor | None = None
_parts_lock = threading.Lock()


def _part_pool() -> ThreadPoolExecutor:
    global _parts
    with _parts_lock:
        if _parts is None:
            _parts = ThreadPoolExecutor(PARTS, thread_name_prefix="jupyter-pause-get")
        return _parts


def _tls(fs: Any) -> ssl.SSLContext:
    """The certificate checks botocore would make: ``client_kwargs["verify"]`` (False, or a CA
    bundle's path), else ``AWS_CA_BUNDLE``, else the system's."""
    verify = fs.client_kwargs.get("verify", os.environ.get("AWS_CA_BUNDLE") or True)
    if verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)


class DirectGet:
    """Presigned GETs of one s3fs filesystem's objects, each read into its final buffer."""

    def __init__(self, fs: Any) -> None:
        self.fs = fs
        self._tls: ssl.SSLContext | None = None
        self._local = threading.local()

    @classmethod
    def of(cls, fs: Any) -> DirectGet | None:
        """The direct road for ``fs``; None where a GET needs what only s3fs sends (a proxy,
        requester-pays, customer-provided keys, extra request parameters)."""
        proxied = any(os.environ.get(name) or os.environ.get(name.upper()) for name in PROXIES)
        extra = fs.req_kw or fs.s3_additional_kwargs or fs.config_kwargs.get("proxies")
        return None if proxied or extra else cls(fs)

    def read(self, path: str, size: int) -> Buffer | None:
        """The ``size`` bytes of the object at ``path`` in a buffer of their own; None when this
        road could not read them all (the caller reads through s3fs)."""
        url = urllib.parse.urlsplit(self.fs.url(path, expires=EXPIRES))
        if url.scheme not in ("http", "https") or size <= 0:
            return None
        buf = buffer(size)
        ranges = [(start, min(start + REMOTE_BLOCK, size)) for start in range(0, size, REMOTE_BLOCK)]
        if len(ranges) <= 2:
            return buf if self._fill(url, buf, 0, size, ranged=False) else None
        done = _part_pool().map(lambda r: self._fill(url, buf, r[0], r[1], ranged=True), ranges)
        return buf if all(list(done)) else None

    def _fill(self, url: urllib.parse.SplitResult, buf: Buffer, start: int, end: int, ranged: bool) -> bool:
        """Read bytes ``[start, end)`` of the object into ``buf[start:end]``; whether all came.
        A dropped connection is tried again on a fresh one; a reply that is not the range asked
        for (an error, another size) is not: s3fs's read names it."""
        for _ in range(ATTEMPTS):
            connection = self._connection(url)
            whole = False
            try:
                headers = {"Range": f"bytes={start}-{end - 1}"} if ranged else {}
                connection.request("GET", f"{url.path}?{url.query}", headers=headers)
                reply = connection.getresponse()
                if reply.status != (206 if ranged else 200) or reply.getheader("Content-Length") != str(end - start):
                    return False
                plain = connection.sock if url.scheme == "http" and os.name == "posix" else None
                whole = _receive(reply, buf[start:end], plain)
                if whole:
                    return True
            except (OSError, http.client.HTTPException):
                continue
            finally:
                if not whole:  # a reply left unread, or a broken connection: never used again
                    connection.close()
                    self._local.connections.pop((url.scheme, url.netloc), None)
        return False

    def _connection(self, url: urllib.parse.SplitResult) -> http.client.HTTPConnection:
        """This thread's connection to the store (a forked child never shares its parent's)."""
        local = self._local
        if getattr(local, "pid", None) != os.getpid():
            local.pid, local.connections = os.getpid(), {}
        key = (url.scheme, url.netloc)
        connection = local.connections.get(key)
        if connection is None:
            if url.scheme == "https":
                self._tls = self._tls or _tls(self.fs)
                connection = http.client.HTTPSConnection(url.netloc, timeout=TIMEOUT, context=self._tls)
            else:
                connection = http.client.HTTPConnection(url.netloc, timeout=TIMEOUT)
            local.connections[key] = connection
        return connection


def _receive(reply: http.client.HTTPResponse, view: memoryview, plain: socket.socket | None) -> bool:
    """The reply's body into ``view``, which it exactly fills; whether it all came.

    ``plain``: the connection's socket, over plain HTTP on a POSIX system (``SO_RCVTIMEO`` takes
    a ``timeval`` there). What the reply's reader already holds is taken from it, the rest read
    straight off the socket, one system call for all of it while no stall is longer than
    ``TIMEOUT``; the reply is then closed, the connection kept for the next GET. Over TLS the
    bytes must pass through the SSL object, a record at a time.
    """
    if plain is None or reply.chunked:
        return _read_reply(reply, view)
    done = reply.fp.readinto(view[: min(len(view), len(reply.fp.peek()))])  # a part is never empty
    plain.settimeout(None)  # blocking, so the kernel waits for every byte; SO_RCVTIMEO bounds a stall
    plain.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(TIMEOUT), 0))
    try:
        while done < len(view):
            got = plain.recv_into(view[done:], len(view) - done, socket.MSG_WAITALL)
            if not got:
                return False
            done += got
    finally:
        plain.settimeout(TIMEOUT)
    reply.close()
    return True


def _read_reply(reply: http.client.HTTPResponse, view: memoryview) -> bool:
    """The reply's body into ``view`` through the reply's own reader; whether it all came."""
    done = 0
    while done < len(view):
        got = reply.readinto(view[done:])
        if not got:
            return False
        done += got
    return True
