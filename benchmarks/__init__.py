"""Benchmarks of jupyter_pause (see README.md); ``cases`` holds the cases of ``run.py``."""
