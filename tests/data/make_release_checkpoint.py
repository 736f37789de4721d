"""Write the checkpoint that ``tests/serialize/test_moved.py`` resumes: run as a script, so the
function and class below are notebook-defined (``__main__``) and pickled by value, as in a kernel.

Usage: ``python tests/data/make_release_checkpoint.py STORE_DIR [TAG]``. Each committed store
here must keep resuming with every later release:

- ``release-0.1.0/`` was written by release 0.1.0, before the package was split into subpackages;
- ``engine-layout/`` by the layout that kept capture, serialisation, loops and the restore test
  together under ``jupyter_pause/engine/``; it also holds a checkpoint taken inside a ``steps``
  loop (session ``loop``), whose loop positions name that layout's modules.
 Its source was compiled under the bare name
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


def main(store: str, tag: str = "release 0.1.0") -> None:
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
    jupyter_pause.checkpoint(store=store, session="release", namespace=namespace, tag=tag)
    if hasattr(jupyter_pause, "steps"):
        in_loop(store, tag)


def in_loop(store: str, tag: str) -> None:
    """A checkpoint taken at the third batch of a shuffled DataLoader in a ``steps`` loop, its
    position (and the loader's shuffling state) saved with it."""
    torch.manual_seed(11)
    loader = torch.utils.data.DataLoader(torch.arange(10), batch_size=2, shuffle=True)
    seen = []
    for batch in jupyter_pause.steps(loader, name="batches"):
        seen.append(batch.tolist())
        if len(seen) == 3:
            jupyter_pause.checkpoint(store=store, session="loop", namespace={"seen": seen}, tag=tag)


if __name__ == "__main__":
    main(*sys.argv[1:3])
