"""The restore test: the evidence a checkpoint records (probe value, fingerprints, model checks)
and the verdict that compares a kernel against it (restored, partial, fresh or live).

It may import ``serialize``, ``store`` and the root modules; ``session`` imports it to record the
evidence, never the other way (see ``jupyter_pause.layers``).
"""
