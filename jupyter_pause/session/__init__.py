"""Capturing a session into a checkpoint and bringing it back: capture, the write, restore, the
restore test's cycle, lineage, the kernel's activity and its ledger events (``kernel_events``),
the model files whose tensors a checkpoint references instead of copying (``modelfiles``), and
what will not travel to another node (``travel``).

``checkpoint`` and ``restore`` are the two operations; ``cycle`` ties a resume to its restore
test. What the process holds beside its variables is in ``process``, rebuilding by replay in
``replay``; loop positions belong to ``loops``, which plugs them in through ``running``. It may
import ``process``, ``replay``, ``serialize``, ``proof``, ``store``, ``ledger`` and the root
modules; never ``loops``, ``kernel``, ``server`` or ``protocol`` (see ``jupyter_pause.layers``).
Torch is imported lazily, where a value needs it.
"""
