"""Recipes and their replay, in this process: what a recipe holds, and that replay never changes a
restored variable. (The round trips through real kernels are ``test_rebuild_kernels``.)"""

from __future__ import annotations

import hashlib
import random
import sqlite3

from jupyter_pause.replay import rebuild
from jupyter_pause.replay.history import History
from jupyter_pause.replay.reach import reach


def _ran(*cells: str) -> tuple[History, dict]:
    """The history of ``cells`` and the namespace they leave, as a kernel would have them."""
    history, namespace = History(recording=True), {}
    for number, cell in enumerate(cells, start=1):
        exec(cell, namespace)
        history.record_cell(cell, number)
    return history, namespace


def _recipes(history, namespace, unsaved, imports=()):
    saved = [n for n in namespace if n not in unsaved and n != "__builtins__" and n not in imports]
    return {r.name: r for r in rebuild.plan(history, {n: namespace[n] for n in unsaved}, saved, imports)}


def test_a_memory_object_gets_every_change_and_an_outside_one_only_its_opening(tmp_path):
    history, ns = _ran(
        "import hashlib, sqlite3\nh = hashlib.sha256()\nh.update(b'a')",
        f"conn = sqlite3.connect({str(tmp_path / 'x.db')!r})\nconn.execute('create table t (a)')\nh.update(b'b')",
        "conn.execute('insert into t values (1)')\nconn.commit()",
    )
    recipes = _recipes(history, ns, ["h", "conn"], imports=["hashlib", "sqlite3"])
    assert [s.source for s in recipes["h"].steps] == ["h = hashlib.sha256()", "h.update(b'a')", "h.update(b'b')"]
    assert (recipes["h"].reach, recipes["conn"].reach) == ("memory", "outside")
    assert [s.source for s in recipes["conn"].steps] == [f"conn = sqlite3.connect({str(tmp_path / 'x.db')!r})"]
    assert recipes["h"].reads == ["hashlib"] and not recipes["h"].missing


def test_a_statement_that_changes_a_restored_variable_is_left_out_and_named():
    history, ns = _ran("gen = (i for i in range(9))\nseen = []", "seen.append(next(gen))\nnext(gen)")
    (recipe,) = _recipes(history, ns, ["gen"]).values()
    assert [s.source for s in recipe.steps] == ["gen = (i for i in range(9))", "next(gen)"]
    assert recipe.notes == ["cell 2 (seen.append(next(gen))) not replayed: it also changes restored variable(s) seen"]


def test_what_cannot_be_rebuilt_says_why():
    history, ns = _ran("import hashlib\nkey = b'k'\nh = hashlib.sha256(key)\ng = (c for c in str(h))")
    del ns["key"]  # not saved
    recipes = _recipes(history, ns, ["h", "g"], imports=["hashlib"])
    assert recipes["h"].missing == "needs key, which the checkpoint does not hold"
    assert recipes["g"].missing == "needs h, which cannot be rebuilt"
    ns["stray"] = (i for i in range(2))
    assert _recipes(history, ns, ["stray"])["stray"].missing.startswith("no recorded cell assigns it")
    unrecorded = History(recording=False)
    assert "load the extension" in _recipes(unrecorded, ns, ["stray"])["stray"].missing


def test_replay_rebuilds_in_the_namespace_and_puts_every_restored_name_back():
    history, ns = _ran(
        "import random\ndata = [1, 2, 3]\ngen = (x * 2 for x in data)\nfirst = (next(gen), random.random())",
        "tmp = 'made by replay'\nlabels = map(str, gen)\nnext(labels)",
    )
    recipes = list(_recipes(history, ns, ["gen", "labels"], imports=["random"]).values())
    restored = {"__builtins__": __builtins__, "random": random, "data": ns["data"], "first": "restored value"}
    data = restored["data"]
    random.seed(5)
    expected_draw = random.random()
    random.seed(5)
    report = rebuild.replay(recipes, restored)
    assert report.done == ["gen", "labels"] and [r.statements for r in report.rebuilt] == [4, 4]
    assert restored["first"] == "restored value" and restored["data"] is data and "tmp" not in restored
    assert next(restored["labels"]) == "6" and list(restored["gen"]) == []  # each advanced as it was
    assert random.random() == expected_draw  # the replay drew nothing from the session's streams


def test_a_recipe_that_raises_is_named_and_the_others_go_on():
    history, ns = _ran("limit = 3\nok = iter(range(limit))\nbad = iter(range(10 // limit))")
    recipes = list(_recipes(history, ns, ["ok", "bad"]).values())
    report = rebuild.replay(recipes, {"__builtins__": __builtins__, "limit": 0})
    outcome = {r.name: r.error for r in report.rebuilt}
    assert outcome["ok"] == ""
    assert outcome["bad"] == (
        "replaying cell 1 (bad = iter(range(10 // limit))) raised ZeroDivisionError: integer division or modulo by zero"
    )
    assert any(line.startswith("NOT rebuilt: bad (range_iterator): replaying cell 1") for line in report.lines())


def test_switched_off_nothing_runs_and_the_summary_says_so():
    history, ns = _ran("gen = (i for i in range(3))")
    namespace = {"__builtins__": __builtins__}
    report = rebuild.replay(list(_recipes(history, ns, ["gen"]).values()), namespace, on=False)
    assert "gen" not in namespace and report.lines() == [
        "rebuild by replay is off: variables that could not be saved are not rebuilt"
    ]


def test_reach_tells_memory_from_outside(tmp_path):
    conn = sqlite3.connect(":memory:")
    handle = open(tmp_path / "f", "w")

    class Holder:
        def __init__(self):
            self.file = handle

    class Unknown:
        pass

    try:
        assert reach(hashlib.md5()) == "memory"
        assert reach(i for i in ()) == "iterator" and reach(map(str, [])) == "iterator"
        assert reach({}.keys()) == reach({}.values()) == reach({}.items()) == "memory"
        assert reach(conn) == reach(conn.cursor()) == reach(handle) == "outside"
        assert reach(Holder()) == "outside"  # holds an open file
        assert reach(Unknown()) == "outside"  # not known to live in memory: its writes are never repeated
    finally:
        handle.close()
        conn.close()


def test_what_opening_again_would_empty_is_not_rebuilt(tmp_path):
    path = tmp_path / "log.txt"
    history, ns = _ran(
        f"class Log:\n    def __init__(self, p):\n        self.file = open(p, 'w')\nlog = Log({str(path)!r})",
        "log.file.write('kept')\nlog.file.flush()",
    )
    try:
        (recipe,) = _recipes(history, ns, ["log"]).values()
        assert recipe.missing.startswith("opening it again would empty what it wrote (a file open with mode 'w')")
        assert rebuild.replay([recipe], {"__builtins__": __builtins__}).done == []
        assert path.read_text() == "kept"
    finally:
        ns["log"].file.close()


def test_every_statement_that_changed_an_object_is_in_its_slice_in_order():
    """A method call, an attribute set, an augmented assignment, in the same cell and later ones,
    reading restored variables without changing them (``words[0].encode()``)."""
    history, ns = _ran(
        "import hashlib\nwords = ['alpha', 'beta']\nm = hashlib.sha256(); m.update(words[0].encode())",
        "m.update(words[1].encode())\nprint(m.hexdigest(), len(words))",
    )
    recipes = _recipes(history, ns, ["m"], imports=["hashlib"])
    assert [s.source for s in recipes["m"].steps] == [
        "m = hashlib.sha256()",
        "m.update(words[0].encode())",
        "m.update(words[1].encode())",
    ]
    assert not recipes["m"].notes and recipes["m"].reads == ["hashlib", "words"]
    restored = {"__builtins__": __builtins__, "hashlib": hashlib, "words": ns["words"]}
    assert rebuild.replay(list(recipes.values()), restored).done == ["m"]
    assert restored["m"].hexdigest() == hashlib.sha256(b"alphabeta").hexdigest()


def test_a_progress_bar_is_rebuilt_with_its_updates():
    """tqdm's update() redraws a bar in the notebook's output: no outside effect, so it is replayed."""
    history, ns = _ran(
        "from tqdm.auto import tqdm\npbar = tqdm(total=100)",
        "for step in range(10):\n    pbar.update(1)",
        "pbar.set_postfix(loss=0.5)\npbar.n",
    )
    (recipe,) = _recipes(history, ns, ["pbar"], imports=["tqdm"]).values()
    assert recipe.reach == "memory"
    assert [s.source for s in recipe.steps][1:] == [
        "for step in range(10):\n    pbar.update(1)",
        "pbar.set_postfix(loss=0.5)",
    ]
    restored = {"__builtins__": __builtins__, "tqdm": ns["tqdm"]}
    assert rebuild.replay([recipe], restored).done == ["pbar"] and restored["pbar"].n == 10
    ns["pbar"].close()
    restored["pbar"].close()


def test_an_object_writing_only_to_the_notebooks_output_does_not_reach_outside(tmp_path):
    import sys

    class Bar:  # a progress bar of a kind known to live in memory, writing to the output
        def __init__(self, fp):
            self.fp = fp

    Bar.__module__ = "tqdm.std"
    with open(tmp_path / "log", "a") as handle:
        assert reach(Bar(sys.stderr)) == reach(Bar(sys.__stdout__)) == "memory"
        assert reach(Bar(handle)) == "outside"  # a file of its own: its writes are never repeated
