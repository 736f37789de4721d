"""What identifies a ``steps`` loop: the ``steps`` calls of its cell, not the rest of the cell's text.

The cell's source is parsed (IPython keeps it in ``linecache`` under the code's file name) and
its ``steps(...)`` calls are listed in source order, each with its iterable's source expression,
its ``name=`` and the ``steps`` loop whose body it is in. A loop's derived identity hashes that
list, the loop's place in it and its nesting depth when it runs: an edit outside the ``steps``
calls (a print, a sleep, a learning rate) keeps every identity; a different iterable, or another
number or nesting of loops, changes them all. The hash of the whole text is kept beside it
(``Found.cell``), so a resumed loop can say that its cell was edited.

The call is found by the exact position of the instruction running it (Python 3.11's
``co_positions``); a call that cannot be found (no source, an alias of ``steps``) falls back to
the text hash, the line and the depth, which is also how checkpoints of earlier versions named
their loops (``Found.legacy``).
"""

from __future__ import annotations

import ast
import functools
import itertools
import json
import linecache
import os
import re
from dataclasses import dataclass
from types import FrameType

import xxhash

__all__ = ["Call", "Found", "differences", "find", "outline"]


@dataclass(frozen=True)
class Call:
    """One ``steps(...)`` call of a cell, as far as identity goes."""

    iterable: str  # the source expression of what it loops over, as ``ast.unparse`` writes it
    name: str | None  # its ``name=`` (the source text when it is not a literal)
    parent: int | None  # the index of the ``steps`` call whose loop body holds it

    def as_list(self) -> list[object]:
        """The call as a manifest records it."""
        return [self.iterable, self.name, self.parent]

    @classmethod
    def of(cls, item: object) -> Call:
        """A call back from its manifest record (``as_list``)."""
        iterable, name, parent = item  # type: ignore[misc]
        return cls(str(iterable), name, parent)


@dataclass(frozen=True)
class Found:
    """A ``steps`` call located in its cell: its derived identity and what the identity is made of."""

    identity: str
    legacy: str  # the identity earlier versions derived: cell text, line, depth
    label: str  # the loop variable when it is one name, else "item"
    cell: str  # hash of the cell's whole text
    calls: tuple[Call, ...]  # the cell's steps calls, in source order
    index: int | None  # this call's place among them (None: not found, identity is ``legacy``)

    def record(self) -> dict[str, object]:
        """What a checkpoint keeps beside the loop's position to match it with an edited cell."""
        if self.index is None:
            return {"cell": self.cell}
        return {"cell": self.cell, "calls": [c.as_list() for c in self.calls], "index": self.index}


_FOR_TARGET = re.compile(r"\bfor\s+([A-Za-z_]\w*)\s+in\b")


def find(frame: FrameType, depth: int) -> Found:
    """The ``steps`` call ``frame`` is running, the same for the same cell in any kernel."""
    filename, line = frame.f_code.co_filename, frame.f_lineno
    lines = linecache.getlines(filename)
    text = "".join(lines) if lines else os.path.basename(filename)
    cell = xxhash.xxh3_64_hexdigest(text.encode("utf-8", "replace"))[:12]
    here = lines[line - 1] if 0 < line <= len(lines) else ""
    target = _FOR_TARGET.search(here)
    label = target.group(1) if target else "item"
    legacy = f"cell-{cell}:line-{line}:depth-{depth}"
    calls, spans = _calls(text) if lines else ((), ())
    index = _index(frame, spans)
    if index is None:
        return Found(legacy, legacy, label, cell, calls, None)
    shape = json.dumps([c.as_list() for c in calls]).encode()
    identity = f"loops-{xxhash.xxh3_64_hexdigest(shape)[:12]}:loop-{index}:depth-{depth}"
    return Found(identity, legacy, label, cell, calls, index)


def _index(frame: FrameType, spans: tuple[tuple[int, int, int, int], ...]) -> int | None:
    """Which of the cell's calls the frame's current instruction is (by its exact source span)."""
    try:
        span = next(itertools.islice(frame.f_code.co_positions(), frame.f_lasti // 2, None))
    except (StopIteration, ValueError):
        return None
    if span in spans:
        return spans.index(span)  # type: ignore[arg-type]
    on_line = [i for i, s in enumerate(spans) if s[0] == frame.f_lineno]
    return on_line[0] if len(on_line) == 1 else None


@functools.lru_cache(maxsize=64)
def _calls(text: str) -> tuple[tuple[Call, ...], tuple[tuple[int, int, int, int], ...]]:
    """The ``steps`` calls of a cell's source and their spans (none when it does not parse)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return (), ()
    finder = _Finder()
    finder.visit(tree)
    return tuple(finder.calls), tuple(finder.spans)


class _Finder(ast.NodeVisitor):
    """Collects ``steps(...)`` and ``<anything>.steps(...)`` calls with the loop each one is in."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.spans: list[tuple[int, int, int, int]] = []
        self.parent: int | None = None

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (isinstance(func, ast.Name) and func.id == "steps") or (
            isinstance(func, ast.Attribute) and func.attr == "steps"
        ):
            self.calls.append(Call(_iterable(node), _name(node), self.parent))
            span = (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset)
            self.spans.append(span)  # type: ignore[arg-type]
        self.generic_visit(node)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        before = len(self.calls)
        self.visit(node.iter)
        self.visit(node.target)
        outer = self.parent
        if len(self.calls) > before:
            self.parent = before  # the loop over this steps call holds its body's calls
        for statement in node.body:
            self.visit(statement)
        self.parent = outer
        for statement in node.orelse:
            self.visit(statement)

    visit_AsyncFor = visit_For  # type: ignore[assignment]


def _iterable(node: ast.Call) -> str:
    if node.args:
        return ast.unparse(node.args[0])
    given = next((k.value for k in node.keywords if k.arg == "iterable"), None)
    return ast.unparse(given) if given is not None else ""


def _name(node: ast.Call) -> str | None:
    given = next((k.value for k in node.keywords if k.arg == "name"), None)
    if given is None:
        return None
    return given.value if isinstance(given, ast.Constant) and isinstance(given.value, str) else ast.unparse(given)


# --- telling two cells' loops apart ---------------------------------------------------------


def outline(calls: tuple[Call, ...]) -> str:
    """``loop 1 over `range(3)`, loop 2 over `loader` inside loop 1``: a cell's loops for people."""
    parts = []
    for i, call in enumerate(calls):
        named = f" named {call.name!r}" if call.name is not None else ""
        inside = f" inside loop {call.parent + 1}" if call.parent is not None else ""
        parts.append(f"loop {i + 1} over `{call.iterable}`{named}{inside}")
    return ", ".join(parts) or "no steps loops"


def differences(before: tuple[Call, ...], now: tuple[Call, ...]) -> list[str]:
    """What changed in a cell's ``steps`` calls, loop by loop, for people ([] when nothing did)."""
    if len(before) != len(now):
        return [f"it had {len(before)} steps loop(s) ({outline(before)}) and has {len(now)} now ({outline(now)})"]
    if [c.parent for c in before] != [c.parent for c in now]:
        return [f"the nesting of its loops changed: it was {outline(before)}; it is {outline(now)}"]
    said = []
    for i, (was, is_) in enumerate(zip(before, now, strict=True)):
        if was.iterable != is_.iterable:
            said.append(f"loop {i + 1} looped over `{was.iterable}` and now loops over `{is_.iterable}`")
        if was.name != is_.name:
            said.append(f"loop {i + 1} {_named(was.name, 'was')} and {_named(is_.name, 'is')} now")
    return said


def _named(name: str | None, verb: str) -> str:
    """``was named 'a'`` / ``had no name`` (``verb`` "was"), ``is named 'b'`` / ``has no name`` ("is")."""
    return f"{verb} named {name!r}" if name is not None else f"{'had' if verb == 'was' else 'has'} no name"
