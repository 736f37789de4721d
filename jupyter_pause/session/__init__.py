"""Capturing a session into a checkpoint and bringing it back: selection, capture, the write,
restore, RNG streams, settings, the notebook's own modules, loop positions, lineage, the kernel's
activity and its ledger events (``kernel_events``).

``checkpoint`` and ``restore`` are the two operations; ``cycle`` ties a resume to its restore
test. It may import ``serialize``, ``proof``, ``store``, ``ledger`` and the root modules; never ``loops``,
``kernel``, ``server`` or ``protocol`` (see ``jupyter_pause.layers``). Torch is imported lazily,
where a value needs it.
"""
