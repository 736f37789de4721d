"""Capturing a namespace into a checkpoint and bringing it back, proven.

``checkpoint`` selects and serialises (``selection``, ``pickler``, ``reducers``, ``arrays``),
``restore`` brings a checkpoint back, ``verdict`` is the restore test, ``cycle`` ties a resume to its
test and run report; ``rng``, ``modelcheck``, ``fingerprint``, ``digests``, ``lineage`` and ``probe``
are the evidence they record and compare. Torch is imported lazily, where a value needs it.
"""
