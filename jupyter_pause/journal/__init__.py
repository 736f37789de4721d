"""The work journal: which items of a queue are done, with their results, kept in the store.

It may import ``store`` and the root modules only (see ``jupyter_pause.layers``).
"""
