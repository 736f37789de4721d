"""Turning live values into bytes and back: the pickler and its reducers, arrays kept outside pickle,
blob packing, value digests, device fingerprints, and which tensors equal ranges of a model file
(``filerefs``).

It knows how one value is written and read, not which values a session holds nor where they go.
It may import ``store`` (the blob format) and the root modules; never ``process``, ``session``,
``loops``, ``kernel`` or ``server`` (the table in ``jupyter_pause.layers`` is the rule, checked by a
test).
"""
