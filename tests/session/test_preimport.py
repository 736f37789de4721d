"""Slow imports begun on threads of their own ahead of a restore (session/preimport.py)."""

from __future__ import annotations

import importlib.util
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


def _noting(log: list, real):
    """``readahead.ask`` that notes the paths it is asked for, then asks."""

    def ask(paths):
        paths = list(paths)
        log.append(("asked", paths))
        return real(paths)

    return ask


@pytest.fixture
def compiled_package(module_dir: Path) -> Path:
    """A package ``jp_imports_files`` whose modules are compiled into ``__pycache__`` (one is not),
    with an extension library beside them; its ``__init__`` notes in ``threading.JP_LOG`` that it ran."""
    import py_compile

    package = module_dir / "jp_imports_files"
    (package / "nn").mkdir(parents=True)
    (package / "__init__.py").write_text("import threading\nthreading.JP_LOG.append(('ran', __name__))\n")
    (package / "nn" / "linear.py").write_text("W = 1\n")
    (package / "plain.py").write_text("")  # never compiled: its source is what an import reads
    (package / "_native.so").write_bytes(b"\x7fELF")
    for source in (package / "__init__.py", package / "nn" / "linear.py"):
        py_compile.compile(str(source), cfile=importlib.util.cache_from_source(str(source)))
    return package


def test_a_packages_files_are_asked_for_as_compiled_here_never_outside_its_folder(compiled_package, monkeypatch):
    from jupyter_pause.store import readahead

    log: list = []
    monkeypatch.setattr(readahead, "ask", _noting(log, readahead.ask))
    files = ["__init__.py", "nn/linear.py", "plain.py", "_native.so", "missing.py"]
    hostile = ["../outside.py", "/etc/passwd", "nn/../../outside.py", "", 42]
    asked = preimport.read_ahead(str(compiled_package), files + hostile)
    ((_, paths),) = log
    assert paths == [
        importlib.util.cache_from_source(str(compiled_package / "__init__.py")),
        importlib.util.cache_from_source(str(compiled_package / "nn" / "linear.py")),
        str(compiled_package / "plain.py"),
        str(compiled_package / "_native.so"),
        str(compiled_package / "missing.py"),  # asked, passed over: not there
    ]
    assert asked == 4  # each file that is there, once


def test_an_import_begun_with_its_files_asks_for_them_before_it_runs(compiled_package, monkeypatch):
    from jupyter_pause.store import readahead

    log: list = []
    monkeypatch.setattr(threading, "JP_LOG", log, raising=False)
    monkeypatch.setattr(readahead, "ask", _noting(log, readahead.ask))
    preimport.begin(["jp_imports_files"], {"jp_imports_files": ["__init__.py", "nn/linear.py"], "other": ["x.py"]})
    preimport.wait()
    assert [entry[0] for entry in log] == ["asked", "ran"]
    assert len(log[0][1]) == 2
    log.clear()
    del sys.modules["jp_imports_files"]
    preimport.begin(["jp_imports_files"], {"jp_imports_files": "not a list"})  # a value of the wrong kind
    preimport.wait()
    assert log == [("ran", "jp_imports_files")]  # nothing asked, imported all the same
    log.clear()
    del sys.modules["jp_imports_files"]
    preimport.begin(["jp_imports_files"], "not a mapping")  # a manifest's field of the wrong kind
    preimport.wait()
    assert log == [("ran", "jp_imports_files")]
