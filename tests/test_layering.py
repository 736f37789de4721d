"""The layers the file tree shows are the layers the imports keep.

Every import statement of the package, function-local ones included, goes only where
``jupyter_pause.layers`` allows, and no modules import each other in a cycle; the store, the
server and the command line load without torch or IPython, and ``import jupyter_pause`` stays
cheap. No module, function or folder outgrows the house rules (lines, and share of the package)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import jupyter_pause
from jupyter_pause.layers import ALLOWED, FACADE, RULE

PACKAGE = Path(jupyter_pause.__file__).parent


# -- the import graph, read from the source --------------------------------------------------------


@dataclass(frozen=True)
class Import:
    """One module naming another of the package in an import statement."""

    path: Path
    line: int
    source: str  # the importing module, dotted
    target: str  # the imported module, dotted


def _module_of(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path) -> dict[str, Path]:
    return {_module_of(p, root): p for p in sorted(root.rglob("*.py"))}


def _imports(root: Path) -> Iterator[Import]:
    """Every import of a module of the package, anywhere in any module (relative imports resolved;
    ``from pkg import name`` counts as importing ``pkg.name`` when that is a module)."""
    modules = _modules(root)
    for source, path in modules.items():
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            for target in dict.fromkeys(targets):
                while target and target not in modules:
                    target = target.rpartition(".")[0]  # a name inside a module: the module
                if target and target != source:
                    yield Import(path, node.lineno, source, target)


def _part(module: str) -> str:
    """``jupyter_pause.store.catalog`` -> ``store``; ``jupyter_pause`` -> the facade."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else FACADE


def forbidden(root: Path, allowed: dict[str, frozenset[str]]) -> list[str]:
    """Each import between two parts that ``allowed`` does not list, as ``file:line: why``."""
    found = []
    for imp in _imports(root):
        source, target = _part(imp.source), _part(imp.target)
        if source == target or source == FACADE:
            continue
        if target not in allowed.get(source, frozenset()):
            may = ", ".join(sorted(allowed.get(source, ()))) or "nothing"
            found.append(
                f"{imp.path.relative_to(root.parent)}:{imp.line}: {source} -> {target} "
                f"(imports {imp.target}); {source} may import {may}"
            )
    return found


def cycle(graph: dict[str, set[str]] | dict[str, frozenset[str]]) -> list[str]:
    """One cycle of ``graph`` as a path (first node repeated at the end), or [] when it has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_every_import_between_parts_is_one_the_table_allows():
    wrong = forbidden(PACKAGE, ALLOWED)
    assert not wrong, "imports that jupyter_pause/layers.py does not allow:\n" + "\n".join(wrong)


def test_the_table_has_no_cycle_and_names_every_part():
    assert cycle(ALLOWED) == []
    assert all(target in ALLOWED for targets in ALLOWED.values() for target in targets)
    parts = {_part(m) for m in _modules(PACKAGE)} - {FACADE, RULE}
    assert parts == set(ALLOWED), f"parts missing from the table: {sorted(parts - set(ALLOWED))}"


def test_no_modules_import_each_other_in_a_cycle():
    graph: dict[str, set[str]] = {}
    for imp in _imports(PACKAGE):
        graph.setdefault(imp.source, set()).add(imp.target)
    assert cycle(graph) == []


def test_a_forbidden_import_inside_a_function_is_named_with_its_file_and_line(tmp_path):
    root = tmp_path / "jupyter_pause"
    for folder in ("store", "kernel"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "kernel" / "magics.py").write_text("from ..store import catalog\n")
    (root / "store" / "catalog.py").write_text(
        "def find():\n    return 1\n\n\ndef later():\n"
        "    from jupyter_pause.kernel import magics\n\n    return magics\n"
    )
    (root / "store" / "mapping.py").write_text("def f():\n    from ..kernel.magics import x  # noqa\n")
    allowed = {"store": frozenset(), "kernel": frozenset({"store"})}

    why = "store -> kernel (imports jupyter_pause.kernel.magics); store may import nothing"
    assert forbidden(root, allowed) == [
        f"jupyter_pause/store/catalog.py:6: {why}",
        f"jupyter_pause/store/mapping.py:2: {why}",
    ]
    graph: dict[str, set[str]] = {}
    for imp in _imports(root):
        graph.setdefault(imp.source, set()).add(imp.target)
    assert cycle(graph) == ["jupyter_pause.kernel.magics", "jupyter_pause.store.catalog", "jupyter_pause.kernel.magics"]


def test_a_cycle_in_the_table_is_found():
    assert cycle({"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"})}) == ["a", "b", "c", "a"]
    assert cycle({"a": frozenset({"b"}), "b": frozenset()}) == []


# -- what each layer loads ---------------------------------------------------------------------------

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


# -- the size of the rooms -------------------------------------------------------------------------

#: The house rules a newcomer can rely on: a module is read in one sitting, a function on one
#: screen, and no folder holds more than a quarter of the package.
MODULE_LINES, FUNCTION_LINES, FOLDER_SHARE = 450, 80, 0.25


def test_no_module_function_or_folder_outgrows_the_house_rules():
    too_long, folders = [], {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        lines = len(source.splitlines())
        name = path.relative_to(PACKAGE)
        if lines > MODULE_LINES:
            too_long.append(f"{name}: {lines} lines (at most {MODULE_LINES})")
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > FUNCTION_LINES:
                    too_long.append(f"{name}:{node.lineno} {node.name}: {length} lines (at most {FUNCTION_LINES})")
        folder = name.parts[0] if len(name.parts) > 1 else "."
        folders[folder] = folders.get(folder, 0) + lines
    total = sum(folders.values())
    too_long += [
        f"{folder}/: {n / total:.0%} of the package's lines (at most {FOLDER_SHARE:.0%})"
        for folder, n in folders.items()
        if n > FOLDER_SHARE * total
    ]
    assert not too_long, "split these by what they do:\n" + "\n".join(too_long)
