"""How far an object that cannot be saved reaches: only memory, or outside the process.

That decides how much of its history a resume replays (``rebuild``): all of it for an object
that lives only in memory, only the statement that opened it for one that reaches outside, so no
row is inserted twice and no event is written twice.

Writing to the notebook's output is not reaching outside: an object whose only outside part is
the process's ``sys.stdout``/``sys.stderr``, or a ``tqdm`` progress bar (its ``update()`` redraws a
bar in the output), is rebuilt with every change, so a bar at 10/100 comes back at 10/100 (what
the replay prints is swallowed).
"""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import types
from collections.abc import Iterable
from typing import Any

MEMORY, ITERATOR, OUTSIDE = "memory", "iterator", "outside"

#: Modules (and their submodules) whose objects reach outside the process.
OUTSIDE_MODULES = (
    "sqlite3",
    "_sqlite3",
    "socket",
    "ssl",
    "subprocess",
    "http.client",
    "urllib3",
    "requests",
    "httpx",
    "aiohttp",
    "psycopg",
    "psycopg2",
    "pymysql",
    "MySQLdb",
    "duckdb",
    "sqlalchemy",
    "pymongo",
    "redis",
    "paramiko",
    "ftplib",
    "smtplib",
    "multiprocessing",
    "torch.utils.tensorboard",
    "tensorboardX",
    "tensorboard",
    "wandb",
    "mlflow",
    "neptune",
    "comet_ml",
    "clearml",
    "aim",
)

#: Modules whose objects live only in memory: replaying every change rebuilds their state.
MEMORY_MODULES = (
    "_hashlib",
    "_blake2",
    "_md5",
    "_sha1",
    "_sha2",
    "_sha256",
    "_sha512",
    "_sha3",
    "hashlib",
    "hmac",
    "zlib",
    "_bz2",
    "_lzma",
    "itertools",
    "ipywidgets",
    # A progress bar: its ``update()`` writes to the notebook's output, not outside the process.
    "tqdm",
)

#: ``dict.keys()``, ``values()`` and ``items()``: views of a dictionary, in memory only.
_DICT_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))

#: Methods of an outside object that open another one without acting through it (``conn.cursor()``).
OPENERS = frozenset({"cursor"})


def _under(module: str, roots: Iterable[str]) -> bool:
    return any(module == root or module.startswith(root + ".") for root in roots)


def _outside_kind(value: Any) -> bool:
    kind = type(value)
    if isinstance(value, (io.IOBase, socket.socket, subprocess.Popen)):
        return True
    if _under(getattr(kind, "__module__", "") or "", OUTSIDE_MODULES):
        return True
    # DB-API 2.0 by shape: a connection commits and makes cursors, a cursor executes and fetches.
    has = {name for name in ("cursor", "commit", "execute", "fetchone") if callable(getattr(kind, name, None))}
    return {"cursor", "commit"} <= has or {"execute", "fetchone"} <= has


def _output(value: Any) -> bool:
    """Whether ``value`` is this process's own output (``sys.stdout``/``sys.stderr``, which a kernel
    sends to the notebook): writing there is no outside effect."""
    streams = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    return any(value is stream for stream in streams if stream is not None)


def reach(value: Any) -> str:
    """How much of an unsaveable object's history a resume replays: ``memory``, ``iterator`` or
    ``outside`` (an object that raises on inspection, a dead weak proxy, is taken to reach outside)."""
    try:
        return _reach(value)
    except ReferenceError:
        return OUTSIDE


def _reach(value: Any) -> str:
    """``reach`` for an object that can be inspected.

    An object holding an outside one in its attributes (a writer holding its open file) reaches
    outside too; an object of a kind not known to live in memory is taken to reach outside.
    """
    if _outside_kind(value):
        return OUTSIDE
    attributes = getattr(value, "__dict__", None)
    if isinstance(attributes, dict) and any(_outside_kind(v) and not _output(v) for v in list(attributes.values())):
        return OUTSIDE
    if isinstance(value, (types.GeneratorType, types.AsyncGeneratorType)):
        return ITERATOR
    if isinstance(value, _DICT_VIEWS):  # a view of a dict: memory only
        return MEMORY
    kind = type(value)
    if _under(getattr(kind, "__module__", "") or "", MEMORY_MODULES):
        return MEMORY
    if callable(getattr(kind, "__next__", None)) and callable(getattr(kind, "__iter__", None)):
        return ITERATOR
    return OUTSIDE


#: Modes in which opening a file again empties it, or fails because it exists.
_EMPTYING = ("w", "x")


def _emptying_mode(value: Any) -> str:
    mode = getattr(value, "mode", None)
    if isinstance(value, io.IOBase) or type(value).__module__ in ("tarfile", "zipfile"):
        if isinstance(mode, str) and any(m in mode for m in _EMPTYING) and not getattr(value, "closed", False):
            return mode
    return ""


def destructive(value: Any) -> str:
    """Why replaying the statement that opened ``value`` would destroy what it wrote ("" when it would not):
    a file or archive open for writing (mode ``w`` or ``x``), itself or in its attributes."""
    try:
        return _destructive(value)
    except ReferenceError:
        return ""


def _destructive(value: Any) -> str:
    attributes = getattr(value, "__dict__", None)
    held = list(attributes.values()) if isinstance(attributes, dict) else []
    for part in (value, *held):
        mode = _emptying_mode(part)
        if mode:
            return (
                f"opening it again would empty what it wrote (a file open with mode {mode!r}); "
                "open it again yourself, in mode 'a' or 'r+'"
            )
    return ""
