"""Where the GPU hours go: totals, charts and idle-policy what-ifs computed from the ledger.

``records`` reads ledger records, ``timeline`` turns them into held / active / paused intervals per
session, ``totals`` adds those up over a window, ``whatif`` replays the activity against idle
thresholds, and ``text`` and ``page`` show the results to a person.
"""
