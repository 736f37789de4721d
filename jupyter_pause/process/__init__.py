"""What the kernel process holds beside its variables, as a checkpoint keeps it and a restore puts
it back: which names of the namespace are the user's (``selection``), the RNG streams (``rng``),
settings such as matplotlib's rcParams, the working folder and ``sys.path`` (``settings``,
``places``) and the notebook's own modules (``localmodules``).

It may import ``serialize``, ``store`` and the root modules (see ``jupyter_pause.layers``).
"""
