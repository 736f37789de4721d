"""The cell history: each statement the kernel ran, and the names it assigned, changed and read.

No value is recorded, only source and names, so the history can travel with every checkpoint (a
blob, ``FORMAT`` versioned) and a resume can rebuild what could not be saved by running the
statements that made it again (``rebuild``). A statement is one top-level statement of a cell as
the kernel ran it, magics already turned into ``get_ipython()`` calls. Of a cell that raised, the
statements before the one that raised are kept; that one and the rest are not (they did not run,
or ran halfway).

What counts as a change of a name: a method call on it (``h.update(...)``, ``w.layout.width``
counts for ``w``) other than one that only reads (``PURE_METHODS``: ``words[0].encode()``,
``m.hexdigest()``), an attribute or item assignment or deletion, an augmented assignment,
``next(name)`` and ``del name``. Code inside a ``def`` or ``lambda`` body runs later, when called:
its names count as reads, never as changes. A statement that may bind names it does not show
(``%run``, most other magics, ``exec``, ``eval``, ``globals()``, ``from m import *``) is *opaque*;
one that calls IPython at all is never replayed. A statement that may hold a secret (it assigns a
name that looks like one, or passes ``password=...`` or the like) is kept without its source, as
a checkpoint never stores a secret: it is never replayed either.
"""

from __future__ import annotations

import ast
import builtins
import json
from dataclasses import asdict, dataclass, field
from types import TracebackType

from ..process.selection import looks_secret

#: Version of the history blob; a reader refuses newer ones.
FORMAT = 1

#: Names every namespace has: reading them needs nothing from a checkpoint.
BUILTINS = frozenset(dir(builtins))

#: Magics that bind no variable: a statement running one is not opaque (it is still never replayed).
PLAIN_MAGICS = frozenset(
    {
        "checkpoint",
        "resume",
        "load_ext",
        "reload_ext",
        "unload_ext",
        "matplotlib",
        "config",
        "who",
        "whos",
        "pwd",
        "history",
        "lsmagic",
        "pip",
        "conda",
        "timeit",
        "env",
    }
)

#: Methods that never change the object they are called on: reading ``words[0].encode()`` or
#: ``m.hexdigest()`` is no change of ``words`` or ``m``. Only names whose every common meaning reads
#: (``str``/``bytes`` methods, a hash's digests, a mapping's views, ``copy``); never one, like
#: ``get`` or ``pop``, that some kind (a queue) uses to take something out.
PURE_METHODS = frozenset(
    {
        *("encode", "decode", "format", "format_map", "join", "split", "rsplit", "splitlines", "partition"),
        *("rpartition", "strip", "lstrip", "rstrip", "removeprefix", "removesuffix", "lower", "upper"),
        *("casefold", "title", "capitalize", "swapcase", "startswith", "endswith", "replace", "find", "rfind"),
        *("index", "rindex", "count", "isdigit", "isalpha", "isalnum", "isspace", "isnumeric", "isdecimal"),
        *("islower", "isupper", "zfill", "ljust", "rjust", "center", "expandtabs", "translate", "hex"),
        *("hexdigest", "digest", "keys", "values", "items", "copy", "tolist", "tobytes", "item"),
    }
)

#: Builtins whose call may bind or change any name.
_DYNAMIC = frozenset({"exec", "eval", "globals", "vars", "locals", "__import__"})


@dataclass
class Statement:
    """One statement as it ran: its cell, its source, and the names it assigned, changed and read."""

    cell: int
    source: str
    assigns: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    opaque: bool = False  # may bind names it does not show (%run, exec, a star import)
    replayable: bool = True  # False when it calls IPython (a magic, a shell command), or is redacted
    redacted: bool = False  # its source may hold a secret: not kept


def _base(node: ast.AST) -> str | None:
    """The name at the root of ``a.b[c].d``, or None when the root is no plain name."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _bound_in(node: ast.AST) -> set[str]:
    """Names a function, lambda or comprehension binds locally (its arguments and stored names)."""
    bound: set[str] = set()
    arguments = getattr(node, "args", None)
    if isinstance(arguments, ast.arguments):
        every = arguments.posonlyargs + arguments.args + arguments.kwonlyargs
        every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
        bound |= {a.arg for a in every}
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            bound.add(child.id)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and child is not node:
            bound.add(child.name)
    return bound


class _Scan(ast.NodeVisitor):
    """Collect one top-level statement's names (see the module docstring for what counts)."""

    def __init__(self) -> None:
        self.assigns: set[str] = set()
        self.changes: set[str] = set()
        self.reads: set[str] = set()
        self.opaque = False
        self.replayable = True
        self.local: list[set[str]] = []  # the names bound by each enclosing function or comprehension
        self.deferred = 0  # inside a def or lambda body: nothing runs now

    @property
    def top(self) -> bool:
        return not self.local

    def _changed(self, name: str | None) -> None:
        if name is not None and not self.deferred and not any(name in scope for scope in self.local):
            self.changes.add(name)

    def visit_Name(self, node: ast.Name) -> None:
        if any(node.id in scope for scope in self.local):
            return
        if isinstance(node.ctx, ast.Load):
            self.reads.add(node.id)
            if node.id in _DYNAMIC:
                self.opaque = True
            if node.id == "get_ipython":
                self.replayable = False
        elif self.top:
            self.assigns.add(node.id)
            if isinstance(node.ctx, ast.Del):
                self.changes.add(node.id)

    def _scope(self, node: ast.AST, body: list[ast.AST], deferred: bool) -> None:
        self.local.append(_bound_in(node))
        self.deferred += deferred
        for child in body:
            self.visit(child)
        self.deferred -= deferred
        self.local.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if self.top:
            self.assigns.add(node.name)
        for child in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
            if child is not None:
                self.visit(child)
        self._scope(node, node.body, deferred=True)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if self.top:
            self.assigns.add(node.name)
        for child in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(child)
        self._scope(node, node.body, deferred=False)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for child in [*node.args.defaults, *node.args.kw_defaults]:
            if child is not None:
                self.visit(child)
        self._scope(node, [node.body], deferred=True)

    def _comprehension(self, node: ast.AST) -> None:
        generators = node.generators  # type: ignore[attr-defined]
        self.visit(generators[0].iter)  # evaluated in the enclosing scope
        parts = [generators[0].target, *generators[0].ifs, *generators[1:]]
        parts += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]  # type: ignore[attr-defined]
        self._scope(node, parts, deferred=False)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "*":
                self.opaque = True
            elif self.top:
                self.assigns.add(alias.asname or alias.name.split(".")[0])

    visit_ImportFrom = visit_Import

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        """``x += 1`` changes ``x`` (it needs the value before), it does not make it anew."""
        if isinstance(node.target, ast.Name) and not any(node.target.id in scope for scope in self.local):
            self._changed(node.target.id)
            self.reads.add(node.target.id)
            self.visit(node.value)
            return
        self.generic_visit(node)

    def _target(self, node: ast.Attribute | ast.Subscript) -> None:
        if not isinstance(node.ctx, ast.Load):
            self._changed(_base(node))
        self.generic_visit(node)

    visit_Attribute = visit_Subscript = _target

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr not in PURE_METHODS:
                self._changed(_base(func.value))
            magic = _magic_name(node)
            if magic is not None and magic not in PLAIN_MAGICS:
                self.opaque = True
        elif isinstance(func, ast.Name) and func.id == "next" and node.args:
            self._changed(_base(node.args[0]))
        self.generic_visit(node)


def _magic_name(call: ast.Call) -> str | None:
    """``'run'`` for ``get_ipython().run_line_magic('run', ...)``, and so on; None for other calls."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in ("run_line_magic", "run_cell_magic", "magic")):
        return None
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value.split()[0] if call.args[0].value.split() else ""
    return ""


def analyse(source: str, cell: int, stop_line: int | None = None) -> list[Statement]:
    """The statements of one cell's Python ``source`` (as the kernel ran it), with their names.

    ``stop_line``: the line of the statement that raised; it and those after it are left out.
    Source that does not parse gives no statements (it did not run).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    statements = []
    for node in tree.body:
        if stop_line is not None and node.end_lineno is not None and node.end_lineno >= stop_line:
            break
        scan = _Scan()
        scan.visit(node)
        secret = _may_hold_secret(node, scan.assigns)
        statements.append(
            Statement(
                cell=cell,
                source="" if secret else ast.unparse(node),
                assigns=sorted(scan.assigns),
                changes=sorted(scan.changes),
                reads=sorted(scan.reads),
                opaque=scan.opaque,
                replayable=scan.replayable and not secret,
                redacted=secret,
            )
        )
    return statements


def _may_hold_secret(node: ast.AST, assigns: set[str]) -> bool:
    """Whether a statement's source may hold a secret: it assigns a secret-looking name, or names
    one as a keyword, a dict key or an attribute it sets."""
    if any(looks_secret(name) for name in assigns):
        return True
    for child in ast.walk(node):
        if isinstance(child, ast.keyword) and child.arg and looks_secret(child.arg):
            return True
        if isinstance(child, ast.Dict):
            if any(
                isinstance(k, ast.Constant) and isinstance(k.value, str) and looks_secret(k.value) for k in child.keys
            ):
                return True
        if isinstance(child, ast.Attribute) and not isinstance(child.ctx, ast.Load) and looks_secret(child.attr):
            return True
        if isinstance(child, ast.Subscript) and not isinstance(child.ctx, ast.Load):
            key = child.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and looks_secret(key.value):
                return True
    return False


def failed_line(error: BaseException | None) -> int | None:
    """The line of the cell's own top-level code at which ``error`` was raised (None: unknown or no error).

    The cell's code is the first ``<module>`` frame of the traceback (IPython's ``run_code`` comes before it).
    """
    tb: TracebackType | None = error.__traceback__ if error is not None else None
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "<module>":
            return tb.tb_lineno
        tb = tb.tb_next
    return None


@dataclass
class History:
    """The statements this kernel ran, oldest first, and whether its cells are being recorded."""

    statements: list[Statement] = field(default_factory=list)
    recording: bool = False

    def record_cell(self, source: str, cell: int, error: BaseException | None = None) -> list[Statement]:
        """Add a cell that ran: its statements, up to the one that raised ``error`` when it raised."""
        stop = failed_line(error) if error is not None else None
        if error is not None and stop is None:
            return []  # raised somewhere unknown: which statements ran cannot be told
        added = analyse(source, cell, stop)
        self.statements += added
        return added

    def to_bytes(self) -> bytes:
        """The history as a versioned JSON blob."""
        body = {"format": FORMAT, "recording": self.recording, "statements": [asdict(s) for s in self.statements]}
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes | bytearray) -> History:
        """Read a blob ``to_bytes`` wrote; ``ValueError`` for one of a newer format."""
        body = json.loads(bytes(data))
        if body.get("format", 0) > FORMAT:
            raise ValueError(
                f"the cell history has format {body.get('format')}, newer than this jupyter-pause reads "
                f"({FORMAT}); upgrade jupyter-pause to rebuild from it"
            )
        return cls([Statement(**s) for s in body.get("statements", [])], bool(body.get("recording")))


#: This kernel's history: cells are added as they run (``kernel.recorder``), a full resume
#: continues the checkpoint's.
current = History()


def forget() -> None:
    """Hold no history, as a kernel process that just started (a test helper)."""
    global current
    current = History()
