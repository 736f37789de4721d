"""The checkpoint format and everything that reads or writes a store.

``layout`` names every key; ``storage`` is the one interface over fsspec, with what differs
between a local folder, S3, GCS and Azure Blob in ``backends`` (one module each) and the aligned
buffers it reads into in ``buffers``; ``manifest`` is the record that makes a checkpoint exist;
``catalog`` finds checkpoints; ``signing``, ``seals`` and ``integrity`` prove their bytes;
``writer`` writes blobs into the store's one ``pool``; ``modelfiles`` puts the model files a kernel
loaded into that pool and indexes their tensors, which a manifest names by ``references``;
``retention`` cleans up (``judging`` says which manifests a cleanup may count, ``poolsweep`` sweeps
the pool, ``cleanup`` says what goes and why); ``uploads`` finds writes cut short; ``report`` keeps
run reports.

This package never imports torch, IPython, ipywidgets or jupyter_server: the server and the command
line read stores through it without loading a kernel's stack.
"""
