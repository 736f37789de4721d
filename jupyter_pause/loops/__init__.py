"""``steps`` loops and their safe points: where a running training loop can be checkpointed,
paused by the server, stopped by SIGTERM, and continued exactly after a resume.

``positions`` keeps where each loop is and ``resumable`` how each kind of iterable continues; they
plug into the checkpoint through ``session.running`` as this package is imported, so a checkpoint
records the loops and a restore arms them without ``session`` importing this layer.

It may import ``session`` (to checkpoint), ``process`` (the RNG streams a loader draws from),
``protocol`` (to answer the server from a busy cell) and the root modules; never ``kernel`` or
``server`` (see ``jupyter_pause.layers``).
"""

from ..session import running
from . import positions

running.plug(positions)
