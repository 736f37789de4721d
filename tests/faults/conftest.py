"""The fault-injection suite: its ``tally`` fixture (the counts are printed at the end of the run
by tests/conftest.py)."""

from tests.support.tally import tally  # noqa: F401
