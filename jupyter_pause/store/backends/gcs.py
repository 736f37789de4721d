"""Google Cloud Storage (gcsfs): fsspec's defaults serve it best.

Its one-shot upload (``pipe_file``) measured four times slower than its file object against the
GCS emulator, so blobs go through the file object as on the generic backend; its conditional
create (``ifGenerationMatch=0``) is fsspec's exclusive mode.
"""

from __future__ import annotations

from .base import Backend


class GCSBackend(Backend):
    """gcsfs's ``GCSFileSystem``."""

    name = "GCS"
