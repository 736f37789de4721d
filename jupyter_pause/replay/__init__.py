"""Rebuilding by replay what cannot be saved: the cell history (``history``), what a statement
reaches outside the process (``reach``), and the replay plan and its run on resume, with the
check of each rebuilt object (``rebuild``).

It may import ``process``, ``proof``, ``store`` and the root modules (see ``jupyter_pause.layers``).
"""
