"""Where the modules named in older checkpoints' pickle streams live now.

A pickle stream names the module of every class and function it references by value's reference
(``jupyter_pause.engine.arrays.load_array``). Release 0.1.0 kept some modules at the top of the
package, later checkpoints wrote them under ``engine/`` until it was split by concern, and
``session/`` was split again later; those names must keep resolving, so every unpickler of the
package reads through ``find_moved``.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

_ENGINE = {
    "serialize": "arrays classes devicehash digests kinds openfiles packing parametrized pickler reducers segments "
    "weakrefs",
    "session": "activity background capture checkpoint context cycle ledger lineage restore staging",
    "process": "localmodules rng selection settings",
    "loops": "positions resumable",
    "proof": "fingerprint modelcheck probe verdict",
}

#: Modules that ``session/`` held until it was split by concern.
_SESSION = {
    "process": "localmodules places rng selection settings",
    "replay": "history reach rebuild",
    "loops": "positions resumable",
}

#: Old module path -> the module that holds its contents now.
MOVED_MODULES: dict[str, str] = {
    "jupyter_pause.arrays": "jupyter_pause.serialize.arrays",
    "jupyter_pause.reducers": "jupyter_pause.serialize.reducers",
    "jupyter_pause.engine.loops": "jupyter_pause.loops.steps",
    "jupyter_pause.engine.safepoints": "jupyter_pause.loops.safepoints",
    "jupyter_pause.engine.inloop": "jupyter_pause.loops.inloop",
    "jupyter_pause.engine.journal": "jupyter_pause.journal.journal",
    "jupyter_pause.engine.interrupt": "jupyter_pause.protocol.channel",
    "jupyter_pause.engine.notebook": "jupyter_pause.notebook",
    **{
        f"jupyter_pause.engine.{m}": f"jupyter_pause.{folder}.{m}" for folder, ms in _ENGINE.items() for m in ms.split()
    },
    **{
        f"jupyter_pause.session.{m}": f"jupyter_pause.{folder}.{m}"
        for folder, ms in _SESSION.items()
        for m in ms.split()
    },
}


def find_moved(module: str) -> str:
    """The module path to import for ``module`` as an older pickle stream names it."""
    return MOVED_MODULES.get(module, module)


class Unpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that resolves the module paths of older releases."""

    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(find_moved(module), name)


def loads(data: bytes | bytearray | memoryview) -> Any:
    """``pickle.loads`` for a blob an older release may have written."""
    return Unpickler(io.BytesIO(data)).load()
