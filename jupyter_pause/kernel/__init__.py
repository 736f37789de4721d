"""What runs inside an IPython kernel: the magics, the status widget, the automatic checkpoints,
and ``remote``, the entry points the Jupyter server calls in a kernel."""
