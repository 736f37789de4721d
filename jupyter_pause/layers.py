"""Which parts of the package may import which: the rule ``tests/test_layering.py`` checks on every
import statement of every module, function-local and ``TYPE_CHECKING`` imports included.

A part is a folder (``store``, ``session`` ...) or a module at the top of the package (``errors``,
``config`` ...). Imports inside a part are free; an import between two parts must be listed here,
and the table has no cycle. The package's ``__init__`` (its public names, loaded on first use) may
import any part and no part imports it. Nothing imports this module: it is the rule, as data.
"""

from __future__ import annotations

#: Part -> the parts it may import. Read bottom-up: each line only names parts above it.
ALLOWED: dict[str, frozenset[str]] = {
    # Words and small helpers every layer shares.
    "errors": frozenset(),
    "units": frozenset(),
    "vocabulary": frozenset(),
    "gpus": frozenset(),
    "notebook": frozenset(),
    # The checkpoint format and its storage.
    "store": frozenset({"errors", "units", "vocabulary"}),
    # The GPU-hours ledger's records, kept in the store.
    "ledger": frozenset({"errors", "vocabulary", "store"}),
    # Settings from traitlets and the environment (``store`` for the signing keys' ``Keyring``).
    "config": frozenset({"errors", "store"}),
    # What the server and a kernel say to each other.
    "protocol": frozenset({"errors", "vocabulary"}),
    # Values to bytes and back.
    "serialize": frozenset({"errors", "store"}),
    # The restore test's evidence and verdict.
    "proof": frozenset({"errors", "config", "serialize", "store"}),
    # What the kernel process holds beside its variables: which names are the user's, RNG streams,
    # settings, working folders, the notebook's own modules.
    "process": frozenset({"errors", "notebook", "store", "serialize"}),
    # The cell history, and rebuilding by replay what cannot be saved.
    "replay": frozenset({"errors", "units", "store", "proof", "process"}),
    # Capturing and restoring a session (loop positions plug in through ``session.running``).
    "session": frozenset(
        {
            "ledger",
            "errors",
            "units",
            "config",
            "gpus",
            "notebook",
            "vocabulary",
            "store",
            "serialize",
            "proof",
            "process",
            "replay",
        }
    ),
    # steps loops, their positions and safe points, in-loop checkpoints.
    "loops": frozenset({"errors", "units", "config", "vocabulary", "protocol", "serialize", "process", "session"}),
    # The work journal.
    "journal": frozenset({"errors", "config", "notebook", "store"}),
    # Inside IPython: magics, widget, periodic checkpoints, the server's entry points.
    "kernel": frozenset(
        {
            "errors",
            "units",
            "config",
            "vocabulary",
            "store",
            "protocol",
            "serialize",
            "proof",
            "replay",
            "session",
            "loops",
        }
    ),
    # The Jupyter server extension: it talks to kernels only through the protocol.
    "server": frozenset({"ledger", "errors", "units", "config", "gpus", "notebook", "vocabulary", "store", "protocol"}),
    # The GPU-hours report, from the ledger.
    "hours": frozenset({"ledger", "errors", "units", "vocabulary", "store"}),
    # The JupyterHub service, beside the Hub (``hours`` for its GPU-hours metrics).
    "hub": frozenset({"ledger", "errors", "units", "config", "vocabulary", "store", "hours"}),
    # The `jupyter pause` command line (``session`` for the options the drill parses its arguments into).
    "cli": frozenset(
        {
            "ledger",
            "errors",
            "units",
            "config",
            "notebook",
            "vocabulary",
            "store",
            "protocol",
            "session",
            "hours",
            "journal",
        }
    ),
}

#: The package's ``__init__``: it may import every part, and no part may import it.
FACADE = "__init__"

#: Not a part: this table.
RULE = "layers"
