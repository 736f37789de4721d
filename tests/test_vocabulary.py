"""Each vocabulary (session and release states, triggers, ledger events) is spelled once: in
``jupyter_pause/vocabulary.py``, and in the front end's generated copy of it.

The front end's ``labextension/src/vocabulary.json`` must be exactly what the module generates,
and no other module of the package (nor any TypeScript source) may spell a list of those words
again: a copy drifts, and then the server and the front end, or two layers, disagree.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import jupyter_pause
from jupyter_pause import vocabulary
from jupyter_pause.store import report
from jupyter_pause.vocabulary import LedgerEvent, ReleaseState, SessionState, Trigger

PACKAGE = Path(jupyter_pause.__file__).parent
FRONT_END = PACKAGE.parent / "labextension" / "src"
FRONT_END_COPY = PACKAGE.parent / vocabulary.FRONT_END_COPY

#: Every word of the vocabularies: a literal made of these alone is a copy of one of them.
WORDS = frozenset(str(w) for kind in (SessionState, ReleaseState, Trigger, LedgerEvent) for w in kind)

#: The run report's moments (``store.report.MOMENTS``) share names with ledger events, since the
#: kernel writes a resume's moments to the ledger under their own names: a list of moments is the
#: report's vocabulary, not a copy of the ledger's.
MOMENTS = frozenset(report.MOMENTS)

#: Fewest words a literal needs to count as a copy of a vocabulary (two-word pairs stay legal in
#: Python: a state machine's own ``("paused", "stopped")``).
LEAST_PYTHON = 3
LEAST_TYPESCRIPT = 2

FIX = "use jupyter_pause.vocabulary instead (a group there, or a new one, plus --write for the front end)"


def test_the_front_end_copy_is_the_generated_one() -> None:
    """``vocabulary.json`` is exactly what ``python -m jupyter_pause.vocabulary`` generates."""
    assert FRONT_END_COPY.is_file(), f"no {FRONT_END_COPY}: run python -m jupyter_pause.vocabulary --write"
    written = FRONT_END_COPY.read_text(encoding="utf-8")
    assert json.loads(written) == json.loads(vocabulary.as_json()), (
        f"{FRONT_END_COPY} disagrees with jupyter_pause/vocabulary.py: run python -m jupyter_pause.vocabulary --write "
        "and rebuild the front end"
    )
    assert written == vocabulary.as_json(), (
        f"{FRONT_END_COPY} holds the right words but not as generated: run python -m jupyter_pause.vocabulary --write"
    )


def test_every_vocabulary_goes_to_the_front_end() -> None:
    """The copy has each enum as names to values and each group as a list, in the module's order."""
    data = json.loads(vocabulary.as_json())
    for kind in (SessionState, ReleaseState, Trigger, LedgerEvent):
        assert data[kind.__name__] == {m.name: m.value for m in kind}
    assert data["BUSY_STATES"] == ["checkpointing", "waiting", "restoring"]
    assert data["RELEASE_TRIGGERS"] == ["button", "service", "idle"]
    assert list(data["LedgerEvent"].values())[0] == "server_started"  # the ledger orders events this way


def test_the_words_are_plain_strings_on_the_wire() -> None:
    """A member is its value wherever it goes: JSON, formatting, comparison, dict lookup."""
    assert json.dumps({"state": SessionState.PAUSED, "trigger": Trigger.BUTTON}) == (
        '{"state": "paused", "trigger": "button"}'
    )
    assert f"{LedgerEvent.KERNEL_READY}" == "kernel_ready" and ReleaseState.STOPPED == "stopped"
    assert {"idle": 1}[Trigger.IDLE] == 1 and "spot" in vocabulary.PAUSE_TRIGGERS


def test_the_groups_hold_what_their_users_need() -> None:
    """Each group is a part of its vocabulary, and the differences between them are the intended ones."""
    assert set(vocabulary.BUSY_STATES) < set(SessionState)
    assert set(vocabulary.KERNEL_STATES) == set(SessionState) - {SessionState.PAUSED, SessionState.WAITING}
    assert set(vocabulary.CHECKPOINT_TRIGGERS) == set(Trigger) - {Trigger.SERVICE}
    assert set(vocabulary.PAUSE_TRIGGERS) == set(Trigger) - {Trigger.DRILL, Trigger.REBALANCE}
    assert set(vocabulary.RELEASE_ACTIVE_STATES) < set(ReleaseState)
    assert set(vocabulary.SERVER_EVENTS) | set(vocabulary.KERNEL_EVENTS) == set(LedgerEvent)


def _python_sources() -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != Path(vocabulary.__file__):
            yield path


def _literal_words(node: ast.AST) -> list[str] | None:
    """The strings of a tuple, list or set literal (or a dict's keys) made of string constants only."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        items: list[ast.expr | None] = list(node.elts)
    elif isinstance(node, ast.Dict):
        items = list(node.keys)
    else:
        return None
    words = [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
    return words if items and len(words) == len(items) else None


def python_copies(source: str, name: str = "<source>") -> list[str]:
    """Where ``source`` spells a list of vocabulary words (``name:line: words``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        words = _literal_words(node)
        if words is None or len(words) < LEAST_PYTHON or not set(words) <= WORDS or set(words) <= MOMENTS:
            continue
        found.append(f"{name}:{getattr(node, 'lineno', '?')}: {', '.join(words)}")
    return found


def test_no_module_spells_a_vocabulary_again() -> None:
    """No module of the package but ``vocabulary`` has a literal list of states, triggers or events."""
    copies = []
    for path in _python_sources():
        copies += python_copies(path.read_text("utf-8"), str(path.relative_to(PACKAGE.parent)))
    assert not copies, "a vocabulary spelled again; " + FIX + ":\n" + "\n".join(copies)


@pytest.mark.parametrize(
    "source",
    [
        'TRIGGERS = ("manual", "button", "sigterm")',
        'BUSY = ["checkpointing", "waiting", "restoring"]',
        'KNOWN = frozenset({"kernel_started", "activity", "kernel_stopped"})',
        'COLOURS = {"ready": 1, "failed": 2, "paused": 3}',
        'def f(state):\n    return state in ("pausing", "stopping", "stopped")',
    ],
)
def test_a_copy_is_caught(source: str) -> None:
    """The scan finds each kind of copy, wherever it is."""
    assert python_copies(source)


@pytest.mark.parametrize(
    "source",
    [
        'KEEP = ("kernel_stopped", "resume_requested", "resources_available")',  # run-report moments
        'PAIR = ("paused", "stopped")',  # too short to be a vocabulary
        'MIXED = ("ready", "set", "go")',  # not all vocabulary words
        "FROM_THE_VOCABULARY = (Trigger.BUTTON, Trigger.IDLE, Trigger.SPOT)",
    ],
)
def test_what_is_not_a_copy(source: str) -> None:
    """Moments, pairs, other words and the vocabulary's own members are left alone."""
    assert not python_copies(source)


#: A TypeScript array literal of quoted strings only.
_TS_ARRAY = re.compile(r"\[\s*((?:'[^'\n]*'|\"[^\"\n]*\")(?:\s*,\s*(?:'[^'\n]*'|\"[^\"\n]*\"))*)\s*,?\s*\]")
_TS_STRING = re.compile(r"'([^'\n]*)'|\"([^\"\n]*)\"")


def typescript_copies(source: str, name: str = "<source>") -> list[str]:
    """Where TypeScript ``source`` spells an array of vocabulary words (``name:line: words``)."""
    found = []
    for match in _TS_ARRAY.finditer(source):
        words = [a or b for a, b in _TS_STRING.findall(match.group(1))]
        if len(words) >= LEAST_TYPESCRIPT and set(words) <= WORDS:
            line = source.count("\n", 0, match.start()) + 1
            found.append(f"{name}:{line}: {', '.join(words)}")
    return found


@pytest.mark.skipif(not FRONT_END.is_dir(), reason="no front-end sources beside the package (an installed wheel)")
def test_no_front_end_module_spells_a_vocabulary_again() -> None:
    """The front end's sources (tests aside) take their lists from ``vocabulary.json``."""
    copies = [
        c for path in sorted(FRONT_END.glob("*.ts")) for c in typescript_copies(path.read_text("utf-8"), path.name)
    ]
    assert not copies, "a vocabulary spelled again in the front end; import it from ./vocabulary.json:\n" + "\n".join(
        copies
    )
    assert typescript_copies("export const BUSY: ReadonlyArray<string> = [\n  'checkpointing',\n  'waiting'\n];")
