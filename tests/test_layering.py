"""The layers the file tree shows are the layers the imports keep: the store, the server and the
command line load without torch or IPython, and ``import jupyter_pause`` stays cheap."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "IPython", "ipywidgets", "ipykernel")


def _imported_after(statement: str) -> dict[str, bool]:
    """Run ``statement`` in a fresh interpreter and say which heavy modules it loaded."""
    probe = f"import json, sys\n{statement}\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "statement",
    [
        "import jupyter_pause",
        "import jupyter_pause.store.catalog, jupyter_pause.store.integrity, jupyter_pause.store.retention, "
        "jupyter_pause.store.writer, jupyter_pause.store.report",
        "import jupyter_pause.server, jupyter_pause.server.orchestrator",
        "import jupyter_pause.cli, jupyter_pause.cli.drill, jupyter_pause.cli.hours",
        "import jupyter_pause.hub.service, jupyter_pause.hub.web",
    ],
)
def test_layer_loads_without_torch_or_ipython(statement):
    loaded = _imported_after(statement)
    assert not any(loaded.values()), f"{statement!r} imported {[m for m, yes in loaded.items() if yes]}"


def test_store_never_imports_the_server():
    loaded = _imported_after(
        "import jupyter_pause.store.catalog, jupyter_pause.store.writer, jupyter_pause.store.retention\n"
        "assert 'jupyter_server' not in sys.modules, 'the store imported jupyter_server'"
    )
    assert not any(loaded.values())


def test_public_names_load_on_first_use():
    loaded = _imported_after("import jupyter_pause\nassert callable(jupyter_pause.checkpoint)")
    assert loaded["torch"] is False  # torch is imported where a value needs it, not by the package's import
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        import jupyter_pause

        jupyter_pause.nothing_here  # noqa: B018


def test_only_the_hub_service_imports_jupyterhub():
    """The server extension, the kernel-side packages and the command line never load the Hub service (nor
    JupyterHub): it runs beside the Hub, where jupyter-pause[hub] is installed."""
    loaded = _imported_after(
        "import jupyter_pause.server, jupyter_pause.server.extension, jupyter_pause.server.handlers, "
        "jupyter_pause.session, jupyter_pause.loops, jupyter_pause.proof, jupyter_pause.cli\n"
        "hub = [m for m in sys.modules if m.split('.')[0] == 'jupyterhub' or m.startswith('jupyter_pause.hub')]\n"
        "assert not hub, f'imported {sorted(hub)}'"
    )
    assert loaded  # the probe ran


def test_the_hub_policy_is_pure():
    loaded = _imported_after(
        "import jupyter_pause.hub.policy\n"
        "io = [m for m in ('tornado', 'jupyterhub', 'jupyter_server') if m in sys.modules]\n"
        "assert not io, f'the policy imported {io}'"
    )
    assert not any(loaded.values())


def test_the_hours_report_draws_with_matplotlib_only_for_a_page():
    loaded = _imported_after(
        "import jupyter_pause.cli.hours, jupyter_pause.hours.page, jupyter_pause.hours.whatif\n"
        "assert 'matplotlib' not in sys.modules, 'the report imported matplotlib before drawing'"
    )
    assert not any(loaded.values())
