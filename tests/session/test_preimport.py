"""Slow imports begun on threads of their own ahead of a restore (session/preimport.py)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from jupyter_pause.session import preimport

SLOW = """
import threading
threading.ENTERED.set()
threading.GATE.wait(30)
started = threading.current_thread().name
"""


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [n for n in sys.modules if n.startswith("jp_imports_")]:
        del sys.modules[name]


def test_an_import_begun_runs_on_its_own_thread_and_wait_returns_once_it_is_done(module_dir, monkeypatch):
    entered, gate = threading.Event(), threading.Event()
    monkeypatch.setattr(threading, "ENTERED", entered, raising=False)  # the module says it runs,
    monkeypatch.setattr(threading, "GATE", gate, raising=False)  # then waits: held mid-import
    (module_dir / "jp_imports_slow.py").write_text(SLOW)
    preimport.begin(["jp_imports_slow", "sys"])  # one already imported: nothing to begin
    assert entered.wait(30) and "jp_imports_slow" in sys.modules  # begun, not done: partly run
    assert not hasattr(sys.modules["jp_imports_slow"], "started")
    preimport.begin(["jp_imports_slow"])  # asked again while it runs: still the one thread
    finished = threading.Thread(target=preimport.wait)
    finished.start()
    finished.join(0.2)
    assert finished.is_alive()  # wait waits for the import held at the gate
    gate.set()
    finished.join(30)
    assert not finished.is_alive()
    assert sys.modules["jp_imports_slow"].started == "jupyter-pause-import-jp_imports_slow"


def test_an_import_that_fails_is_left_for_the_restore_to_name(module_dir):
    (module_dir / "jp_imports_broken.py").write_text("raise ImportError('needs libcuda.so.1')\n")
    preimport.begin(["jp_imports_broken", "jp_imports_not_installed"])
    preimport.wait()  # nothing raised here
    with pytest.raises(ImportError, match=r"libcuda\.so\.1"):
        import jp_imports_broken  # noqa: F401
    preimport.begin(["jp_imports_broken"])  # a later restore tries again
    preimport.wait()


NATIVE_INIT = """
import os
LIBRARY = os.path.join(os.path.dirname(__file__), "lib", "libjp_native.so")
LOADED_FIRST = any(LIBRARY in line for line in open("/proc/self/maps"))
"""


@pytest.fixture
def native_package(module_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package ``jp_imports_native`` with a native library under ``lib/`` (a copy of ctypes'
    own extension, a real shared object), which notes at import whether it was loaded before."""
    import _ctypes

    package = module_dir / "jp_imports_native"
    (package / "lib").mkdir(parents=True)
    (package / "lib" / "libjp_native.so").write_bytes(Path(_ctypes.__file__).read_bytes())
    (package / "__init__.py").write_text(NATIVE_INIT)
    monkeypatch.setitem(preimport.NATIVE, "jp_imports_native", ("lib/libjp_native.so",))
    return package


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_a_packages_native_library_is_loaded_before_its_import_runs(native_package):
    preimport.begin(["jp_imports_native"])
    preimport.wait()
    assert sys.modules["jp_imports_native"].LOADED_FIRST


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="dlopen")
def test_no_native_library_is_loaded_where_the_package_loads_its_own_way_or_lacks_it(native_package, monkeypatch):
    monkeypatch.setitem(preimport.OWN_LOADING, "jp_imports_native", "JP_IMPORTS_OWN_WAY")
    monkeypatch.setenv("JP_IMPORTS_OWN_WAY", "1")
    assert preimport.load_native("jp_imports_native") == []
    monkeypatch.delenv("JP_IMPORTS_OWN_WAY")
    (native_package / "lib" / "libjp_native.so").unlink()  # another build, without the library
    assert preimport.load_native("jp_imports_native") == []
    assert preimport.load_native("jp_imports_not_installed") == []
    assert "jp_imports_native" not in sys.modules  # looked for, never imported
