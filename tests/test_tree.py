"""The tests' own layout: a folder per package folder, helpers in ``tests/support``, and no test
file importing another (what two test files share belongs in ``support`` or a ``conftest.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "jupyter_pause"
#: Folders that test across the package rather than one folder of it.
ACROSS = {"faults", "fidelity", "benchmarks", "labextension", "support", "corpus", "data"}


def _imported(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_every_package_folder_has_its_test_folder_and_no_other_folder_is_there() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    tests = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    assert folders - {"labextension"} <= tests, f"package folders without tests: {sorted(folders - tests)}"
    assert tests <= folders | ACROSS, f"test folders that mirror nothing: {sorted(tests - folders - ACROSS)}"


def test_no_test_file_imports_another_test_file_or_a_conftest() -> None:
    wrong = [
        f"{path.relative_to(TESTS)} imports {module}"
        for path in TESTS.rglob("*.py")
        for module in _imported(path)
        if module.startswith("tests.") and module.rsplit(".", 1)[-1].startswith(("test_", "conftest"))
    ]
    assert not wrong, "\n".join(wrong)


def test_helpers_live_in_support_and_test_folders_hold_only_tests() -> None:
    stray = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("*.py")
        if path.parent.name not in {"support", "data", "corpus"}
        and "data" not in path.relative_to(TESTS).parts
        and "corpus" not in path.relative_to(TESTS).parts
        and not path.name.startswith("test_")
        and path.name not in {"__init__.py", "conftest.py"}
    ]
    assert not stray, f"helpers outside tests/support: {stray}"
