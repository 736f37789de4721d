"""The notebook behind a kernel: its path, the session name derived from it, its document."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

from jupyter_core.paths import jupyter_runtime_dir

#: Session name used when the kernel knows of no notebook (a console, a script).
DEFAULT_SESSION = "default"


def notebook_path() -> str | None:
    """Absolute path of the kernel's notebook, as jupyter-server passes it in ``JPY_SESSION_NAME``.

    A relative path (the server's API path, when the client named no file) is taken from the
    server's root, else from the folder the kernel started in: never from the working directory,
    which a cell may have changed (``os.chdir("data")``)."""
    path = os.environ.get("JPY_SESSION_NAME")
    if not path:
        return None
    if os.path.isabs(path):
        return os.path.normpath(path)
    root = server_root()
    if root:
        return os.path.normpath(os.path.join(root, path))
    started = kernel_start_folder()
    if started is None:
        return os.path.abspath(path)
    head, name = os.path.split(os.path.normpath(path))
    # jupyter-server starts a notebook's kernel in the notebook's folder: an API path
    # ``project/nb.ipynb`` and a start folder ``.../project`` name the same file.
    inside = bool(head) and os.path.normpath(started).endswith(os.sep + head)
    return os.path.join(started, name) if inside else os.path.normpath(os.path.join(started, path))


def kernel_start_folder() -> str | None:
    """The folder the kernel started in, as IPython took it before any cell ran; None outside IPython."""
    ipython = sys.modules.get("IPython")  # not loaded: no kernel to ask
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    started = getattr(shell, "starting_dir", None)
    return started if isinstance(started, str) and os.path.isabs(started) else None


def server_root() -> str | None:
    """Root folder of the Jupyter server that started this kernel, if it can be found."""
    parent = os.environ.get("JPY_PARENT_PID")
    if not parent:
        return None
    info = Path(jupyter_runtime_dir()) / f"jpserver-{parent}.json"
    try:
        root = json.loads(info.read_text()).get("root_dir")
    except (OSError, ValueError):
        return None
    return os.path.abspath(os.path.expanduser(root)) if root else None


def relative_path(path: str, root: str | None = None) -> str:
    """``path`` relative to the server root when it lies inside it, else its file name."""
    root = root if root is not None else server_root()
    if root:
        try:
            rel = os.path.relpath(path, root)
        except ValueError:
            rel = ""
        if rel and not rel.startswith(".."):
            return rel.replace(os.sep, "/")
    return os.path.basename(path)


def session_from_path(path: str) -> str:
    """A session name from a notebook path: ``dir/Train 1.ipynb`` -> ``dir--Train-1``.

    Characters outside ASCII letters, digits, ``.``, ``_`` and ``-`` become ``-``; when that loses
    letters of another script (``实验.ipynb``), a short hash of the path keeps names apart.
    """
    stem = re.sub(r"\.ipynb$", "", path.strip("/"))
    name = "--".join(re.sub(r"[^A-Za-z0-9._-]+", "-", part).strip("-.") for part in stem.split("/"))
    name = name.strip("-.")
    if not stem.isascii() or not name:
        digest = hashlib.sha1(stem.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        name = f"{name[:119]}-{digest}" if name else f"nb-{digest}"
    name = name[:128]
    return name if name[0].isalnum() else f"nb{name}"[:128]


def default_session() -> str:
    """The session name for this kernel: from its notebook's path, else ``default``."""
    path = notebook_path()
    return session_from_path(relative_path(path)) if path else DEFAULT_SESSION


def read_notebook(path: str | None) -> tuple[bytes | None, str]:
    """The notebook's bytes as on disk now, or None with a note saying why not."""
    if not path:
        return None, "no notebook: this kernel was not started for a notebook file"
    try:
        return Path(path).read_bytes(), f"notebook {os.path.basename(path)} saved as on disk"
    except OSError as e:
        return None, f"notebook {path} not saved: {e.strerror or e}"
