"""Write the checkpoint that ``tests/test_old_checkpoints.py`` resumes: run as a script, so the
function and class below are notebook-defined (``__main__``) and pickled by value, as in a kernel.

Usage: ``python tests/data/make_release_checkpoint.py STORE_DIR``. The committed store under
``release-0.1.0/`` was written by release 0.1.0, before the package was split into subpackages;
it must keep resuming with every later release. Its source was compiled under the bare name
``make_release_checkpoint.py`` (``exec(compile(source, "make_release_checkpoint.py", "exec"))`` in
``__main__``), so the code objects pickled by value name no folder of the machine that wrote it.
"""

from __future__ import annotations

import random
import sys

import numpy as np
import torch

import jupyter_pause


def scaled(x, factor=3):
    """A notebook-defined function: restored by value."""
    return x * factor


class Point:
    """A notebook-defined class: restored by value, with its instances."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def norm2(self):
        return self.x * self.x + self.y * self.y


def main(store: str) -> None:
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(3, 4)).sum().backward()
    opt.step()
    namespace = {
        "count": 42,
        "words": ["pause", "resume"],
        "table": {"a": 1.5, "b": (2, 3)},
        "grid": np.arange(12, dtype=np.float32).reshape(3, 4),
        "weights": torch.linspace(0, 1, 5),
        "model": model,
        "opt": opt,
        "scaled": scaled,
        "point": Point(3, 4),
    }
    jupyter_pause.checkpoint(store=store, session="release", namespace=namespace, tag="release 0.1.0")


if __name__ == "__main__":
    main(sys.argv[1])
