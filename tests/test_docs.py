"""The documentation site: ``make docs`` builds it with warnings as errors, and its generated
reference pages say what the code says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("myst_parser", reason="the docs extra is not installed: run make docs (or make test)")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_the_site_builds_without_warnings(site):
    assert (site / "index.html").is_file()


def test_the_magics_reference_is_their_docstrings(site):
    from jupyter_pause.kernel.magics import PauseMagics

    page = (site / "reference" / "magics.html").read_text()
    for option in ("--exclude", "--every", "--async", "--map-location", "--allow-partial", "--check"):
        assert option in page
    assert "%checkpoint --every 15 --async" in page
    assert PauseMagics.checkpoint.__doc__.split("\n\n")[2].split("\n")[0].strip() in page


def test_the_cli_and_configuration_references_cover_every_command_and_setting(site):
    from jupyter_pause.config import PauseConfig
    from jupyter_pause.server.settings import PauseServer

    cli = (site / "reference" / "cli.html").read_text()
    for command in ("list", "show", "verify", "gc", "report", "journal", "drill", "hours"):
        assert f"jupyter pause {command}" in cli
    assert "jupyter-pause-hub" in cli and "--idle-timeout" in cli
    config = (site / "reference" / "configuration.html").read_text()
    for cls in (PauseConfig, PauseServer):
        for name in cls.class_traits(config=True):
            assert f"c.{cls.__name__}.{name}" in config


ROOT = DOCS.parent


def _block(text: str, heading: str) -> str:
    """The first ``python`` block after ``heading``."""
    return text.split(heading, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.parametrize(
    ("page", "heading"),
    [("jupyterhub.md", "## The Hub's configuration"), ("spot.md", "# Spot and preemptible VMs")],
)
def test_the_docs_configuration_blocks_are_the_ones_the_readme_tests_run(page, heading):
    """The README's Hub block starts a real Hub in ``tests/support/hub.py`` and its spot block configures a
    real watcher in ``tests/server/test_preemption.py``; the manual shows the same lines."""
    readme = (ROOT / "README.md").read_text()
    readme_heading = "### The Hub's configuration" if page == "jupyterhub.md" else "## Spot and preemptible VMs"
    assert _block((DOCS / page).read_text(), heading) == _block(readme, readme_heading)


def test_every_link_of_the_readme_into_the_docs_exists():
    import re

    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert len(links) > 15
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing
    assert len(readme.splitlines()) <= 250
    assert readme.index("%checkpoint") < readme.index("## On JupyterHub")
    assert len(readme[: readme.index("%resume")].splitlines()) <= 60  # a newcomer pauses and resumes by line 60
