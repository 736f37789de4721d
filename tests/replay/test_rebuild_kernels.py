"""Rebuild by replay with real kernels: what cannot be saved is made again on resume, in another
kernel process started in another folder, by replaying the recorded statements that made it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from jupyter_pause.cli.drill import load_notebook

pytestmark = pytest.mark.integration


def _pause_and_resume(start_kernel, tmp_path, *cells: str, resume: str = "%resume --session rebuild", **env: str):
    """Run ``cells`` in kernel A, checkpoint, SIGKILL A; resume in kernel B (another folder).
    Returns kernel B, the checkpoint's summary and the resume's output."""
    store = tmp_path / "store"
    (tmp_path / "a").mkdir(exist_ok=True)
    (tmp_path / "b").mkdir(exist_ok=True)
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), **env)
    a.run("%load_ext jupyter_pause").ok()
    for cell in cells:
        a.run(cell).ok()
    saved = a.run("%checkpoint --session rebuild").ok().stdout
    a.kill()
    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store), **env)
    resumed = b.run(f"%load_ext jupyter_pause\n{resume}").ok().stdout
    return b, saved, resumed


def test_a_hash_object_fed_twice_is_fed_twice(start_kernel, tmp_path):
    b, saved, resumed = _pause_and_resume(
        start_kernel,
        tmp_path,
        "import hashlib\nh = hashlib.sha256()\nh.update(b'first')\nn = 1",
        "h.update(b'second')\nprint(h.hexdigest())",
    )
    assert "h (_hashlib.HASH): rebuilt on resume from 3 statement(s)" in saved  # print(h.hexdigest()) reads it
    assert "rebuilt and checked: h (_hashlib.HASH) by replay of 3 statement(s) in " in resumed
    assert (
        "1 restored, 1 rebuilt by replay (not digest-verified: they were never saved; 1 rebuilt and checked)" in resumed
    )
    assert "verdict: restored" in resumed
    expected = __import__("hashlib").sha256(b"firstsecond").hexdigest()
    assert b.value("h.hexdigest()") == expected
    assert resumed.count(expected) == 0  # what the replayed statements print is not shown


def test_a_generator_advanced_n_times_continues_where_it_was(start_kernel, tmp_path):
    b, saved, resumed = _pause_and_resume(
        start_kernel,
        tmp_path,
        "def numbers(limit):\n    for i in range(limit):\n        yield i * i\nsquares = numbers(10)",
        "next(squares)\nnext(squares)",
        "taken = next(squares)",
    )
    assert "squares (generator): rebuilt on resume from 4 statement(s)" in saved
    assert "rebuilt and checked: squares (generator)" in resumed
    assert b.value("taken") == 4  # restored, never replaced by the replay's own value
    assert b.value("[next(squares), next(squares)]") == [9, 16]


def test_an_iterator_over_a_rebuilt_generator_shares_it(start_kernel, tmp_path):
    b, _, resumed = _pause_and_resume(
        start_kernel,
        tmp_path,
        "gen = (i * 10 for i in range(100))\nnext(gen)\nlabels = map(str, gen)",
        "next(labels)\nnext(gen)",
    )
    assert "rebuilt and checked: gen (generator)" in resumed and "rebuilt and checked: labels (map)" in resumed
    assert b.value("[next(labels), next(gen), next(labels)]") == ["30", 40, "50"]


def test_itertools_count_comes_back_at_its_position(start_kernel, tmp_path):
    b, _, resumed = _pause_and_resume(
        start_kernel, tmp_path, "import itertools\nticket = itertools.count(100)", "next(ticket)\nnext(ticket)"
    )
    assert "verdict: restored" in resumed
    assert b.value("next(ticket)") == 102


def test_a_sqlite_connection_is_reopened_and_its_insert_not_repeated(start_kernel, tmp_path):
    db = tmp_path / "shared.db"
    b, saved, resumed = _pause_and_resume(
        start_kernel,
        tmp_path,
        f"import sqlite3\nconn = sqlite3.connect({str(db)!r})\ncur = conn.cursor()\n"
        "cur.execute('create table runs (loss real)')\ncur.execute('insert into runs values (0.5)')\nconn.commit()",
    )
    assert (
        "conn (sqlite3.Connection): rebuilt on resume from 2 statement(s) (only the statement that opened it" in saved
    )
    assert "cur (sqlite3.Cursor): rebuilt by replay, unproven: only the statement that opened it" in saved, saved
    assert "conn (sqlite3.Connection): rebuilt by replay, unproven" not in saved  # its database files are checked
    assert (
        "rebuilt and checked: conn (sqlite3.Connection)" in resumed  # the same database file
        and "rebuilt, not checkable: cur (sqlite3.Cursor)" in resumed
    )
    assert b.value("cur.execute('select count(*) from runs').fetchone()[0]") == 1
    assert b.value("conn.execute('select count(*) from runs').fetchone()[0]") == 1


def test_a_widget_with_an_attribute_set_comes_back_with_it(start_kernel, tmp_path):
    pytest.importorskip("ipywidgets")
    b, _, resumed = _pause_and_resume(
        start_kernel,
        tmp_path,
        "import ipywidgets\nslider = ipywidgets.IntSlider(value=3, max=50)",
        "slider.value = 42\nslider.description = 'lr'",
    )
    assert "verdict: restored" in resumed
    assert b.value("[slider.value, slider.max, slider.description]") == [42, 50, "lr"]


STAND_IN_WRITER = '''
import os, queue, threading

class SummaryWriter:
    """Stands in for torch.utils.tensorboard's: events go through a queue to a writer thread,
    which appends them to one event file per log dir."""

    def __init__(self, log_dir):
        os.makedirs(log_dir, exist_ok=True)
        self.file = open(os.path.join(log_dir, "events.out"), "a")
        self.events = queue.Queue()
        threading.Thread(target=self._write, daemon=True).start()

    def _write(self):
        while True:
            self.file.write(self.events.get())
            self.events.task_done()

    def add_scalar(self, tag, value, step):
        self.events.put(f"{tag} {value} {step}\\n")

    def flush(self):
        self.events.join()
        self.file.flush()
'''


def _event_steps(kernel, logs) -> list[int]:
    """The steps of the scalar events under ``logs``, read by tensorboard itself."""
    return kernel.value(
        "sorted(e.step for f in __import__('glob').glob(%r + '/*') for e in "
        "__import__('tensorboard.backend.event_processing.event_file_loader', fromlist=['x'])"
        ".EventFileLoader(f).Load() if e.summary.value)" % str(logs)
    )


def test_a_summary_writer_is_reopened_on_its_log_dir_without_duplicated_events(start_kernel, tmp_path):
    """Its opening statement is replayed, never the statements that wrote events through it. (Only
    dill could copy it, threads and all; such a copy would not write: it is rebuilt instead.)"""
    logs, lib = tmp_path / "logs", tmp_path / "lib"
    lib.mkdir()
    try:
        import tensorboard  # noqa: F401

        opening, real = "from torch.utils.tensorboard import SummaryWriter", True
    except ImportError:
        (lib / "boards.py").write_text(STAND_IN_WRITER)
        opening, real = "from boards import SummaryWriter", False
    b, saved, resumed = _pause_and_resume(
        start_kernel,
        tmp_path,
        f"{opening}\nwriter = SummaryWriter({str(logs)!r})",
        "for step in range(3):\n    writer.add_scalar('loss', 1.0 / (step + 1), step)\nwriter.flush()",
        PYTHONPATH=str(lib),
    )
    assert "writer (" in saved and "rebuilt on resume from 1 statement(s)" in saved
    assert ("rebuilt and checked: writer (" if real else "rebuilt, not checkable: writer (") in resumed, resumed
    b.run("writer.add_scalar('loss', 0.1, 3)\nwriter.flush()").ok()
    if real:
        assert _event_steps(b, logs) == [0, 1, 2, 3]
    else:
        events = (logs / "events.out").read_text().splitlines()
        assert [line.split()[-1] for line in events] == ["0", "1", "2", "3"]  # steps 0 to 2 once, then 3


def test_a_recipe_whose_input_was_not_saved_names_it(start_kernel, tmp_path):
    b, saved, resumed = _pause_and_resume(
        start_kernel,
        tmp_path,
        "import hashlib\nsalt_secret = b'pepper'\ndigest = hashlib.sha256(salt_secret)",
    )
    assert "digest (_hashlib.HASH): " in saved
    assert "cannot be rebuilt on resume: needs salt_secret, which the checkpoint does not hold" in saved
    assert "NOT rebuilt: digest: needs salt_secret" in resumed
    assert b.value("'digest' in globals()") is False


def test_a_recipe_that_raises_is_named_and_the_resume_goes_on(start_kernel, tmp_path):
    flag = tmp_path / "allowed"
    flag.write_text("yes")
    b, _, resumed = _pause_and_resume(
        start_kernel,
        tmp_path,
        f"import os, hashlib\ndef opened():\n    if not os.path.exists({str(flag)!r}):\n"
        "        raise RuntimeError('the flag file is gone')\n    return hashlib.md5()\n"
        "h = opened()\ngen = (i for i in range(5))\nkept = 'yes'",
        f"os.remove({str(flag)!r})",
    )
    assert "NOT rebuilt: h (_hashlib.HASH): replaying cell" in resumed
    assert "raised RuntimeError: the flag file is gone" in resumed
    assert "rebuilt and checked: gen (generator)" in resumed
    assert "verdict: restored" in resumed
    assert b.value("[kept, next(gen), 'h' in globals()]") == ["yes", 0, False]


def test_no_rebuild_leaves_it_out_from_the_magic_and_the_environment(start_kernel, tmp_path):
    b, _, resumed = _pause_and_resume(
        start_kernel,
        tmp_path,
        "gen = (i for i in range(5))\nnext(gen)",
        resume="%resume --session rebuild --no-rebuild",
    )
    assert "rebuild by replay is off" in resumed and "rebuilt by replay:" not in resumed
    assert b.value("'gen' in globals()") is False
    c = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(tmp_path / "store"), JUPYTER_PAUSE_REBUILD="off")
    again = c.run("%load_ext jupyter_pause\n%resume --session rebuild").ok().stdout
    assert "rebuild by replay is off" in again
    assert c.value("'gen' in globals()") is False


def test_what_ran_outside_the_cell_history_is_named(start_kernel, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "script.py").write_text("made = (i for i in range(3))\n")
    b, saved, resumed = _pause_and_resume(start_kernel, tmp_path, "%run script.py")
    assert "made (generator): " in saved and "no recorded cell assigns it: made by %run, exec" in saved
    assert "NOT rebuilt: made: no recorded cell assigns it" in resumed


def test_the_history_goes_on_across_resumes(start_kernel, tmp_path):
    """A kernel that was resumed records its cells after the checkpoint's: its own checkpoint
    rebuilds what both kernels made."""
    b, _, _ = _pause_and_resume(start_kernel, tmp_path, "gen = (i for i in range(9))\nnext(gen)")
    b.run("next(gen)\nlater = (c for c in 'abc')").ok()
    saved = b.run("%checkpoint --session rebuild").ok().stdout
    assert "gen (generator): rebuilt on resume from 3 statement(s)" in saved
    b.kill()
    c = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(tmp_path / "store"))
    c.run("%load_ext jupyter_pause\n%resume --session rebuild").ok()
    assert json.loads(json.dumps(c.value("[next(gen), next(later)]"))) == [2, "a"]


#: The corpus notebook: a hash fed in two cells from a saved list, a progress bar at 10/100, and a
#: hash fed inside a function (no replay can see that: its rebuild cannot reach the state it had).
PROVEN_CELLS = load_notebook(Path(__file__).resolve().parents[1] / "corpus" / "replay" / "rebuilt_objects.ipynb")[1:]


def test_a_rebuilt_object_is_checked_against_the_state_it_had(start_kernel, tmp_path):
    b, saved, resumed = _pause_and_resume(start_kernel, tmp_path, *PROVEN_CELLS)
    expected = hashlib.sha256(b"alphabeta").hexdigest()
    assert "m (_hashlib.HASH): rebuilt on resume from 3 statement(s)" in saved, saved
    for name in ("m (_hashlib.HASH)", "pbar (", "gen (generator)"):
        assert f"rebuilt and checked: {name}" in resumed, (name, resumed)
    assert b.value("[m.hexdigest(), pbar.n, next(gen), next(ticket)]") == [expected, 10, "BETA", 8]
    assert "rebuilt, differs: planted (_hashlib.HASH)" in resumed, resumed
    assert f"was hexdigest {hashlib.md5(b'seenhidden').hexdigest()}, now hexdigest" in resumed
    assert "verdict: partial" in resumed and "not back: planted (rebuilt, differs)" in resumed, resumed
    assert "3 rebuilt and checked; 1 rebuilt, differs" in resumed, resumed
