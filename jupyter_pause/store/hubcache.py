"""The Hugging Face cache on this node: where it is, and the model files it holds by sha256.

The cache keeps each file it downloaded as ``models--<org>--<name>/blobs/<sha256>``, named by the
sha256 of its bytes: the name a model file has in a checkpoint (``Manifest.model_files``). A
resume on a node whose cache holds the file may read its tensors there (``references``), each
verified by its digest all the same: a name is never taken as proof of the bytes.
"""

from __future__ import annotations

import glob
import os
import re

_SHA256 = re.compile(r"[0-9a-f]{64}")


def hub_cache() -> str:
    """The folder of the Hugging Face hub cache here (``HF_HUB_CACHE``, else under ``HF_HOME``)."""
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")


def claimed_sha256(path: str) -> str | None:
    """The sha256 the name of the file at ``path`` claims (a cache blob's name), or None."""
    base = os.path.basename(os.path.realpath(path))
    return base if _SHA256.fullmatch(base) else None


def cached(sha256: str, size: int) -> list[str]:
    """The files of the cache named ``sha256`` with ``size`` bytes: copies of that model file,
    as far as their names say."""
    if not _SHA256.fullmatch(sha256):
        return []
    found = []
    for path in sorted(glob.glob(os.path.join(hub_cache(), "models--*", "blobs", sha256))):
        try:
            if os.path.getsize(path) == size:
                found.append(path)
        except OSError:
            continue
    return found
