"""Sphinx configuration of the jupyter-pause documentation (MyST Markdown, pydata-sphinx-theme)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

project = "jupyter-pause"
author = "the jupyter-pause developers"
copyright = "2026, the jupyter-pause developers"  # noqa: A001 - Sphinx's own name for it

extensions = ["myst_parser", "references"]
source_suffix = {".md": "markdown"}
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
exclude_patterns = ["_build", "README.md"]

html_theme = "pydata_sphinx_theme"
html_title = "jupyter-pause"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
}
