"""What the extension does when its server stops, at the first thing jupyter-server does then:
remove its own runtime file (``jpserver-<pid>.json``). A server that dies without stopping does
none of it; what is left behind (a node record) says which process wrote it, and is ignored once
that process is gone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def when_stopping(serverapp: Any, callback: Callable[[], None]) -> None:
    """Call ``callback`` when ``serverapp`` stops, before it removes its runtime file (which it
    removes whatever the callback raised)."""
    remove_info_file = serverapp.remove_server_info_file

    def remove_server_info_file() -> None:
        try:
            callback()
        finally:
            remove_info_file()

    serverapp.remove_server_info_file = remove_server_info_file
