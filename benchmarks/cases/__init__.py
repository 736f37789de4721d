"""The cases of ``benchmarks/run.py``, one module each, over the plumbing of ``shared``.

- ``namespace``: case 1, a namespace of small dicts and arrays against ``dill.dump_module``;
- ``tensorwrite``: cases 2a and 2b, a model and AdamW against ``torch.save`` and a raw write;
- ``incremental``: cases 3 and 3b, the next checkpoint after a 1% change against a first;
- ``restore``: case 4, a resume against ``torch.load``;
- ``asynchronous``: case 5, how long ``checkpoint_async`` blocks;
- ``nextcell``: case 6, a resume request to the next cell in a new kernel;
- ``frozen``: case 7, a frozen backbone's periodic checkpoint against a first;
- ``newnode``: case 8, a resume on a node that never ran the notebook, on a local folder and S3
  (its node and server: ``freshnode``);
- ``detection``: case 9, change detection per GiB on the CPU;
- ``report``: targets, verdicts and the table; ``profiling``: the ``--profile`` mode.
"""
