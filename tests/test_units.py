"""One way to print sizes and durations (decimal units, short figures, no ``1000 kB``), and one
way to read a written duration."""

from __future__ import annotations

import re

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


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("10m", 600), (" 2 min ", 120), ("1.5h", 5400), ("7d", 604800), ("2w", 1209600)],
)
def test_a_written_duration_is_read_in_seconds(text, seconds):
    assert units.seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "ten minutes", "-5s", "5 parsecs", "1e3s"])
def test_what_is_not_a_duration_is_refused_by_name(text):
    with pytest.raises(ValueError, match=f"{re.escape(repr(text))} is not a duration"):
        units.seconds(text)


def test_a_bare_number_can_be_required_to_carry_its_unit():
    with pytest.raises(ValueError, match="with its unit"):
        units.seconds("10", bare=None)
