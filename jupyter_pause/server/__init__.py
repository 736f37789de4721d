"""The jupyter-server extension of jupyter-pause (loaded through ``jupyter_pause``)."""

from __future__ import annotations

from .extension import load as _load_jupyter_server_extension

__all__ = ["_load_jupyter_server_extension"]
