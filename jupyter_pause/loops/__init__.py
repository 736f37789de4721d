"""``steps`` loops and their safe points: where a running training loop can be checkpointed,
paused by the server, stopped by SIGTERM, and continued exactly after a resume.

It may import ``session`` (to checkpoint), ``protocol`` (to answer the server from a busy cell)
and the root modules; never ``kernel`` or ``server`` (see ``jupyter_pause.layers``).
"""
