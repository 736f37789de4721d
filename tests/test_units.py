"""One way to print sizes and durations: decimal units, short figures, no ``1000 kB``."""

from __future__ import annotations

import pytest

from jupyter_pause import units


@pytest.mark.parametrize(
    ("n", "shown"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 kB"),
        (150_000, "150 kB"),
        (999_499, "999 kB"),
        (999_500, "1.0 MB"),  # rounds up into the next unit, never "1000 kB"
        (1_500_000, "1.5 MB"),
        (9_960_000, "10 MB"),
        (123_400_000, "123 MB"),
        (12_000_000_000, "12 GB"),
        (3_200_000_000_000, "3.2 TB"),
        (750_000_000_000_000, "750 TB"),
    ],
)
def test_size_boundaries(n, shown):
    assert units.size(n) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0 ms"),
        (0.25, "250 ms"),
        (0.9996, "1.00 s"),
        (4.5, "4.50 s"),
        (59.996, "1.0 min"),
        (143, "2.4 min"),
        (3600, "1.0 h"),
        (5400, "1.5 h"),
    ],
)
def test_duration_boundaries(seconds, shown):
    assert units.duration(seconds) == shown
