"""What installing the package gives: both extensions enabled, the front end built and found."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


def _jupyter(*args: str) -> str:
    done = subprocess.run(
        [str(BIN / "jupyter"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def test_labextension_is_installed_and_enabled(jupyter_dirs):
    listing = _jupyter("labextension", "list")
    line = next((ln for ln in listing.splitlines() if "jupyter-pause" in ln), "")
    assert "enabled" in line and "OK" in line, listing


def test_server_extension_is_enabled_by_installing(jupyter_dirs):
    listing = _jupyter("server", "extension", "list")
    assert "jupyter_pause" in listing and "enabled" in listing.split("jupyter_pause", 1)[1].splitlines()[0]


def test_jupyter_pause_subcommand_has_help(jupyter_dirs):
    out = _jupyter("pause", "--help")
    for command in ("list", "show", "verify", "gc", "report", "drill"):
        assert command in out


ROOT = Path(__file__).resolve().parents[1]


def _first_install_line() -> list[str]:
    """The README's first ``pip install`` line, as a newcomer copies it."""
    block = (ROOT / "README.md").read_text().split("## Install", 1)[1].split("```", 2)[1]
    line = next(x for x in block.splitlines() if x.startswith("pip install"))
    return line.split("#", 1)[0].split()


def _torch_installed_in(venv: Path, site: Path) -> None:
    """The README's first step, ``pip install torch``, as its result: this venv's torch (the
    package and its metadata, linked into ``site``) is seen by the new venv's Python and pip, which
    installs what torch needs and everything else itself. Copying 750 MB of torch again would
    test pip, not this project."""
    torch = importlib.metadata.distribution("torch")
    where = Path(torch.locate_file(""))
    site.mkdir()
    for top in {str(f).split("/")[0] for f in torch.files or () if not str(f).startswith("..")}:
        (site / top).symlink_to(where / top)
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(purelib) / "torch-first.pth").write_text(f"{site}\n")


def test_the_readmes_first_install_line_gives_jupyterlab_with_the_extension(tmp_path):
    """In a fresh venv with nothing else on PATH: torch first (as the README says), then the
    README's first line; ``jupyter lab`` is there, with both extensions enabled."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    _torch_installed_in(venv, tmp_path / "torch-site")
    dirs = {name: str(tmp_path / name) for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR")}
    keep = {
        k: v for k, v in os.environ.items() if k in ("HOME", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONFIG_FILE")
    }
    # pip as a newcomer has it, except that it compiles nothing to bytecode: what it installs and
    # what runs are the same, and compiling took 30% of its CPU time.
    pip_settings = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_COMPILE": "0"}
    env = {**keep, **dirs, **pip_settings, "PATH": str(venv / "bin")}

    def run(*argv: str) -> str:
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout + done.stderr

    command = _first_install_line()
    assert command[:2] == ["pip", "install"], command
    run(*command)
    assert run("jupyter", "lab", "--version").strip()
    lab = run("jupyter", "labextension", "list")
    line = next((x for x in lab.splitlines() if "jupyter-pause" in x), "")
    assert "enabled" in line and "OK" in line, lab
    server = run("jupyter", "server", "extension", "list")
    assert "enabled" in server.split("jupyter_pause", 1)[1].splitlines()[0], server
