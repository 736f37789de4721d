"""An S3 backend that ignores create-if-absent, as some S3-compatible servers do: it stands in for
such a server in front of the real test server (``tests/support/s3_server.py``)."""

from __future__ import annotations

import uuid
from typing import Any

import fsspec
import s3fs

from jupyter_pause.store.storage import Store
from tests.support.s3_server import S3Server

#: The URL scheme the backend is registered under.
PROTOCOL = "s3lax"


class LaxS3FileSystem(s3fs.S3FileSystem):
    """s3fs, except that a put never carries its ``If-None-Match`` condition: it overwrites."""

    protocol = (PROTOCOL,)

    async def _pipe_file(self, path: str, data: bytes, mode: str = "overwrite", **kwargs: Any) -> Any:
        return await super()._pipe_file(path, data, **kwargs)


def lax_store(server: S3Server) -> Store:
    """A fresh store on ``server`` reached through ``LaxS3FileSystem``."""
    fsspec.register_implementation(PROTOCOL, LaxS3FileSystem, clobber=True)
    options = {"key": server.key, "secret": server.secret, "endpoint_url": server.endpoint}
    return Store(f"{PROTOCOL}://{server.bucket}/{uuid.uuid4().hex}", options)
