"""The checkpoint format and everything that reads or writes a store.

``layout`` names every key; ``storage`` is the one interface over fsspec; ``manifest`` is the record
that makes a checkpoint exist; ``catalog`` finds checkpoints; ``signing`` and ``integrity`` prove
their bytes; ``writer`` writes blobs; ``retention`` cleans up; ``report`` keeps run reports.

This package never imports torch, IPython, ipywidgets or jupyter_server: the server and the command
line read stores through it without loading a kernel's stack.
"""
