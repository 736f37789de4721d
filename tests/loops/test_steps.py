"""``jupyter_pause.steps``: safe points between items, loop positions in checkpoints, exact
continuation after a resume (ranges, lists, generators, shuffled DataLoaders), ``every``.

Cells run here as IPython runs them: the source in ``linecache`` under a file name that holds the
process (``/tmp/ipykernel_<pid>/...``); a "new kernel" runs the same source under another name.
"""

from __future__ import annotations

import json
import random
import time
import types
import weakref
from datetime import timedelta

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import jupyter_pause as jp
from jupyter_pause.errors import PauseError
from jupyter_pause.kernel.autocheckpoint import Periodic
from jupyter_pause.loops import positions, resumable
from jupyter_pause.loops import steps as loops
from jupyter_pause.process import rng
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.manifest import Manifest
from jupyter_pause.store.storage import Store
from tests.support.cells import Stop, run_cell
from tests.support.processes import another_process
from tests.support.training import TRAINING, TRAINING_SETUP, uninterrupted_losses


@pytest.fixture
def at_step():
    """``at_step(n, action)``: call ``action(point)`` at the n-th safe point of any loop, then stop."""
    seen = []
    registered = []

    def arrange(n, action=lambda point: None, stop=True):
        def callback(point):
            seen.append(point)
            if len(seen) == n:
                action(point)
                if stop:
                    raise Stop

        registered.append(loops.on_safe_point(callback))
        return seen

    yield arrange
    for callback in registered:
        loops.remove(callback)
    positions.arm([], None)


def interrupted_then_continued(source, make_namespace, stop_after, kernel_b="2", before_continuing=None):
    """Run ``source`` and stop at safe point ``stop_after`` holding the positions and RNG state
    there; then continue in a new namespace (as a new kernel would after a resume). Returns
    (uninterrupted ``out``, ``out`` before the stop + after the continuation, the positions)."""
    whole = make_namespace()
    run_cell(source, whole)
    taken = {}

    def take(point):
        taken["positions"] = positions.capture()
        taken["rng"] = rng.capture()

    callback = _nth_safe_point(stop_after, take)
    first = make_namespace()
    with pytest.raises(Stop):
        run_cell(source, first)
    loops.remove(callback)
    where = taken["positions"]
    second = make_namespace()
    second["out"] = list(first["out"])
    rng.restore(taken["rng"])
    positions.arm(where.records, where.state)
    if before_continuing is not None:
        before_continuing()
    run_cell(source, second, kernel=kernel_b)
    return whole["out"], second["out"], where


def _nth_safe_point(n, action):
    count = [0]

    def callback(point):
        count[0] += 1
        if count[0] == n:
            action(point)
            raise Stop

    return loops.on_safe_point(callback)


NESTED = """
import jupyter_pause as jp
for epoch in jp.steps(range(3)):
    for x in jp.steps(data):
        out.append((epoch, x))
"""


def test_nested_loops_continue_with_the_next_unfinished_item():
    def namespace():
        return {"data": ["a", "b", "c", "d"], "out": []}

    whole, continued, where = interrupted_then_continued(NESTED, namespace, stop_after=7)
    assert continued == whole and len(whole) == 12  # none repeated, none skipped
    outer, inner = where.records
    assert (outer["label"], outer["done"], outer["kind"]) == ("epoch", 1, "range")  # item 1 is running
    assert (inner["label"], inner["done"], inner["kind"]) == ("x", 2, "sequence")  # 2 of 4 done
    assert inner["description"] == "step 2 of epoch 1" and inner["depth"] == 1


def test_a_loop_at_the_end_of_its_pass_lets_the_rest_of_the_outer_item_run():
    source = NESTED + "    out.append(('end of epoch', epoch))\n"

    def namespace():
        return {"data": ["a", "b"], "out": []}

    whole, continued, where = interrupted_then_continued(source, namespace, stop_after=2)
    assert where.records[1]["done"] == 2  # the inner loop had finished, the epoch had not
    assert continued == whole


def test_identity_comes_from_the_cells_steps_calls_not_its_other_text_nor_the_file_name(at_step):
    source = "for i in jp.steps(range(2)):\n    for j in jp.steps(range(2)):\n        pass\n"
    points = at_step(99, stop=False)
    run_cell(source, {"jp": jp}, kernel="1")
    run_cell(source, {"jp": jp}, kernel="2")
    first, second = points[: len(points) // 2], points[len(points) // 2 :]
    assert [p.loop for p in first] == [p.loop for p in second]
    assert len({p.loop for p in first}) == 2  # inner and outer differ
    assert {p.depth for p in first} == {0, 1}
    seen = len(points)
    edited = "import time\n" + source.replace("pass", "time.sleep(0)  # edited") + "print('done')\n"
    run_cell(edited, {"jp": jp})  # edited outside its steps calls: the same identities
    assert [p.loop for p in points[seen:]] == [p.loop for p in first]
    seen = len(points)
    run_cell(source.replace("range(2)):\n        pass", "range(1, 3)):\n        pass"), {"jp": jp})
    assert not {p.loop for p in points[seen:]} & {p.loop for p in first}  # another iterable: other identities
    seen = len(points)
    run_cell(source + "for k in jp.steps([0]):\n    pass\n", {"jp": jp})  # one loop more: other identities
    assert not {p.loop for p in points[seen:]} & {p.loop for p in first}


def test_a_name_overrides_the_derived_identity(at_step):
    points = at_step(99, stop=False)
    run_cell("for i in jp.steps([1, 2], name='warmup'):\n    pass\n", {"jp": jp})
    assert [(p.loop, p.step) for p in points] == [("warmup", 1), ("warmup", 2)]
    with pytest.raises(PauseError, match="non-empty string"):
        jp.steps([1], name="  ")


def test_a_loop_whose_identity_does_not_match_starts_from_the_beginning_and_says_so(capsys):
    positions.arm([{"loop": "elsewhere", "kind": "sequence", "done": 2, "description": "step 2 of epoch 4"}], None)
    try:
        out = []
        run_cell("for i in jp.steps([1, 2, 3]):\n    out.append(i)\n", {"jp": jp, "out": out})
        assert out == [1, 2, 3]
        run_cell("for i in jp.steps([1]):\n    pass\n", {"jp": jp})
        told = capsys.readouterr().err
        assert told.count("matches no loop of the resumed checkpoint") == 1  # said once
        assert "were at step 2 of epoch 4" in told and "name=" in told
        # the matching loop takes its position on its first pass only
        run_cell("for i in jp.steps([1, 2, 3], name='elsewhere'):\n    out.append(i)\n", {"jp": jp, "out": out})
        run_cell("for i in jp.steps([1, 2, 3], name='elsewhere'):\n    out.append(i)\n", {"jp": jp, "out": out})
        assert out == [1, 2, 3, 3, 1, 2, 3]
    finally:
        positions.arm([], None)


def test_a_dict_and_a_generator_over_a_list_continue(capsys):
    source = (
        "for k in jp.steps(table):\n    out.append(k)\nfor v in jp.steps(x * 10 for x in values):\n    out.append(v)\n"
    )

    def namespace():
        return {"jp": jp, "table": {"a": 1, "b": 2, "c": 3}, "values": [1, 2, 3, 4], "out": []}

    whole, continued, where = interrupted_then_continued(source, namespace, stop_after=5)
    assert continued == whole == ["a", "b", "c", 10, 20, 30, 40]
    table, generator = where.records
    assert (table["kind"], table["finished"], table["done"]) == ("mapping", True, 3)  # run again, it is skipped
    assert generator["kind"] == "iterator" and generator["exact"] is False
    assert any("generator" in note and "drawn from it again" in note for note in where.notes)
    assert (
        "jupyter-pause: checkpointed loop 'v' (step 2) may not continue exactly: a generator" in capsys.readouterr().err
    )


LOADER = """
import jupyter_pause as jp
for epoch in jp.steps(range(2)):
    for (x,) in jp.steps(loader):
        out.append((x.tolist(), torch.rand(1).item()))
"""


def _loader_namespace(**options):
    torch.manual_seed(3)
    data = TensorDataset(torch.arange(20.0))
    return {"torch": torch, "loader": DataLoader(data, batch_size=3, shuffle=True, **options), "out": []}


@pytest.mark.parametrize("stop_after", [1, 4, 7, 9])
def test_a_shuffled_dataloader_continues_in_the_same_order_and_rng_streams(stop_after):
    whole, continued, where = interrupted_then_continued(LOADER, _loader_namespace, stop_after)
    assert continued == whole  # the same batches, and torch.rand draws the same numbers after them
    assert where.records[-1]["kind"] == "dataloader" and where.state is not None


def test_a_dataloader_with_its_own_generator_continues():
    def namespace():
        return _loader_namespace(generator=torch.Generator().manual_seed(7))

    whole, continued, _ = interrupted_then_continued(LOADER, namespace, stop_after=5)
    assert continued == whole


@pytest.mark.integration  # starts worker processes
@pytest.mark.parametrize("stop_after", [4, 16])
def test_a_dataloader_with_worker_processes_continues(stop_after):
    def namespace():
        torch.manual_seed(3)
        data = TensorDataset(torch.arange(40.0))
        return {"torch": torch, "loader": DataLoader(data, batch_size=3, shuffle=True, num_workers=2), "out": []}

    whole, continued, _ = interrupted_then_continued(LOADER, namespace, stop_after)
    assert continued == whole


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_loop_drawing_on_the_gpu_continues_with_the_same_cuda_random_stream():
    source = LOADER.replace("torch.rand(1)", "torch.rand(1, device='cuda')")
    whole, continued, _ = interrupted_then_continued(source, _loader_namespace, stop_after=5)
    assert continued == whole


def test_a_dataloader_whose_sampler_draws_from_python_random_continues():
    class Shuffled(torch.utils.data.Sampler):
        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n

        def __iter__(self):
            order = list(range(self.n))
            random.shuffle(order)
            return iter(order)

    def namespace():
        random.seed(11)
        torch.manual_seed(3)
        data = TensorDataset(torch.arange(20.0))
        return {"torch": torch, "loader": DataLoader(data, batch_size=3, sampler=Shuffled(20)), "out": []}

    whole, continued, _ = interrupted_then_continued(LOADER, namespace, stop_after=4)
    assert continued == whole


def test_skipping_done_batches_loads_no_data():
    loaded = []

    class Recorded(torch.utils.data.Dataset):
        def __len__(self):
            return 12

        def __getitem__(self, i):
            loaded.append(i)
            return torch.tensor(float(i))

    def namespace():
        torch.manual_seed(0)
        return {"torch": torch, "loader": DataLoader(Recorded(), batch_size=2, shuffle=True), "out": []}

    source = "import jupyter_pause as jp\nfor x in jp.steps(loader):\n    out.append(x.tolist())\n"
    whole, continued, _ = interrupted_then_continued(source, namespace, 4, before_continuing=loaded.clear)
    assert continued == whole
    assert len(loaded) == 4  # the 2 batches after the stop; the 4 before it were skipped without loading


def test_a_module_is_looped_over_as_a_sequence_never_loaded_as_a_loader():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    assert resumable.kind_of(model).name == "sequence"
    assert [type(m).__name__ for m in jp.steps(model)] == ["Linear", "ReLU"]


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")  # torchdata 0.11 on torch 2.13
def test_a_stateful_loader_continues_through_its_state_dict():
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def namespace():
        torch.manual_seed(5)
        data = TensorDataset(torch.arange(20.0))
        return {"torch": torch, "loader": stateful.StatefulDataLoader(data, batch_size=3, shuffle=True), "out": []}

    for stop_after in (3, 8):
        whole, continued, where = interrupted_then_continued(LOADER, namespace, stop_after)
        assert continued == whole
        assert "stateful" in [r["kind"] for r in where.records]


def test_safe_points_describe_where_the_loop_is(at_step):
    points = at_step(99, stop=False)
    run_cell(NESTED, {"data": [1, 2], "out": []})
    assert [p.description for p in points[:3]] == ["step 1 of epoch 0", "step 2 of epoch 0", "step 1"]
    assert [p.step for p in points] == [1, 2, 1, 1, 2, 2, 1, 2, 3]


def test_a_callback_that_raises_stops_the_loop_and_leaves_no_loop_running(at_step):
    at_step(3)
    with pytest.raises(Stop):
        run_cell(NESTED, {"data": [1, 2], "out": []})
    assert positions.capture().records == []  # the cell has ended: nothing is running


def test_an_ended_loop_keeps_no_locals_alive():
    class Big:
        pass

    def train():
        big = Big()
        for _ in jp.steps(range(2)):
            pass
        return weakref.ref(big)

    held = train()
    jp.steps([])  # the next loop (in IPython, the cell's end) lets go of the ended one's frame
    assert held() is None


def test_a_checkpoint_outside_any_loop_records_no_positions():
    positions.forget()  # as a new process: no loop ran here
    where = positions.capture()
    assert where.records == [] and where.state is None and where.notes == []


@pytest.mark.parametrize(
    ("every", "items", "seconds"),
    [(5, 5, None), ("90s", None, 90), ("10m", None, 600), ("1.5h", None, 5400), (" 2 min ", None, 120)],
)
def test_every_takes_items_or_a_duration(every, items, seconds):
    assert loops.parse_every(every) == loops.Every(items=items, seconds=seconds)
    assert loops.parse_every(timedelta(minutes=2)) == loops.Every(seconds=120)


@pytest.mark.parametrize("every", ["10", "ten minutes", "-5s", "0s", "5 parsecs", 0, -3, 2.5, True, [5]])
def test_a_malformed_every_is_a_clear_error(every):
    with pytest.raises(PauseError, match=r"steps\(every="):
        jp.steps(range(3), every=every)


@pytest.mark.parametrize("value", [5, 3.5, None, object()])
def test_steps_over_something_that_is_not_iterable_is_a_clear_error(value):
    with pytest.raises(PauseError, match=f"needs something to loop over .* not {type(value).__name__}"):
        jp.steps(value)


def test_every_n_items_checkpoints_at_safe_points_across_passes(monkeypatch):
    taken = []

    def copied(**kw):
        taken.append(kw["trigger"])
        return types.SimpleNamespace(done=True, error=None)

    monkeypatch.setattr("jupyter_pause.session.checkpoint.checkpoint_async", copied)
    out = []
    run_cell(
        "for epoch in jp.steps(range(3)):\n    for i in jp.steps(range(4), every=3):\n        out.append(len(taken))\n",
        {"jp": jp, "out": out, "taken": taken},
    )
    assert taken == ["periodic"] * 4  # 12 items, every 3rd, counted across the inner loop's passes
    assert out[3] == 1 and out[6] == 2  # taken between items 3 and 4, 6 and 7


def test_a_periodic_checkpoint_that_fails_is_reported_and_the_loop_goes_on(monkeypatch, capsys):
    def fail(**kw):
        raise jp.StoreError("the store at s3://gone cannot be reached")

    monkeypatch.setattr("jupyter_pause.session.checkpoint.checkpoint_async", fail)
    out = []
    run_cell("for i in jp.steps(range(4), every=2):\n    out.append(i)\n", {"jp": jp, "out": out})
    assert out == [0, 1, 2, 3]
    err = capsys.readouterr().err
    assert err.count("periodic checkpoint at step 2 failed (the store at s3://gone cannot be reached)") == 1
    assert "the loop goes on" in err


def test_checkpoint_every_minutes_fires_at_safe_points_only_when_due():
    calls = []
    periodic = Periodic(minutes=10, take=lambda: calls.append(1) or "summary")
    point = loops.SafePoint("loop", 3, "step 3 of epoch 0", 1)
    periodic.at_safe_point(point)
    assert calls == []
    periodic.last -= 601
    periodic.at_safe_point(point)
    periodic.at_safe_point(point)
    assert calls == [1]


def test_manifests_without_loops_still_load():
    manifest = Manifest(id="x", session="s", lineage="l", parent=None, created=0.0, trigger="manual", node="n")
    body = json.loads(manifest.to_bytes())["manifest"]
    del body["loops"], body["loop_state"]
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    import xxhash

    data = b'{"manifest":' + canonical + b',"checksum":"' + xxhash.xxh3_128_hexdigest(canonical).encode() + b'"}'
    loaded = Manifest.from_bytes(data)
    assert loaded.loops == [] and loaded.loop_state is None


def _checkpoint_at_safe_point(store, session, n):
    """Run ``LOADER`` and checkpoint its namespace at safe point ``n`` (then stop, as a kill)."""
    namespace = _loader_namespace()

    def take(point):
        jp.checkpoint(store=store, session=session, namespace=namespace)

    callback = _nth_safe_point(n, take)
    try:
        with pytest.raises(Stop):
            run_cell(LOADER, namespace)
    finally:
        loops.remove(callback)


def test_a_damaged_loop_state_blob_is_named_and_loops_start_afresh(tmp_path, new_process):
    store, session = str(tmp_path / "store"), "loops"
    _checkpoint_at_safe_point(store, session, 5)
    (manifest,) = Catalog(Store(store)).checkpoints(session)
    blob = tmp_path / "store" / manifest.blob_key(manifest.loop_state.key)
    blob.write_bytes(b"not what was written")
    another_process()
    result = jp.resume(store=store, session=session, namespace={}, allow_partial=True)
    assert "(loop positions) truncated or resized" in result.summary()
    assert any("loop positions NOT restored" in note for note in result.notes)
    assert positions._armed == {}


def test_round_trip_through_a_checkpoint_and_a_resume(tmp_path, new_process):
    """In one process: a checkpoint at a safe point, a resume into a fresh namespace as another
    kernel, the same cell again: the positions travel through the store."""
    store, session = str(tmp_path / "store"), "loops"
    _checkpoint_at_safe_point(store, session, 5)
    whole = _loader_namespace()
    run_cell(LOADER, whole)
    another_process()
    second: dict = {}
    result = jp.resume(store=store, session=session, namespace=second)
    assert any("run that cell again" in note for note in result.notes)
    (manifest,) = Catalog(Store(store)).checkpoints(session)
    assert [r["done"] for r in manifest.loops] == [0, 5] and manifest.loop_state is not None
    run_cell(LOADER, second, kernel="2")
    assert second["out"] == whole["out"]


# --- with real kernels ------------------------------------------------------------------------


def _periodic_checkpoints(store, session):
    try:
        return [m for m in Catalog(Store(str(store))).checkpoints(session) if m.trigger == "periodic"]
    except PauseError:
        return []


@pytest.mark.integration
def test_training_killed_after_a_periodic_checkpoint_continues_bit_identical(start_kernel, tmp_path):
    expected = uninterrupted_losses(start_kernel, tmp_path)
    assert len(expected) == 36

    store, env = tmp_path / "store", {"JUPYTER_PAUSE_SESSION": "train"}
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), **env)
    a.run(TRAINING_SETUP + "pace = 0.05").ok()
    a.send(TRAINING)
    deadline = time.monotonic() + 90
    while len(_periodic_checkpoints(store, "train")) < 3:  # past the first epoch's end
        assert time.monotonic() < deadline, "no periodic checkpoints came from the running cell"
        time.sleep(0.05)
    a.kill()
    latest = _periodic_checkpoints(store, "train")[0]
    epochs = next(r for r in latest.loops if r["depth"] == 0)
    batches = next(r for r in latest.loops if r["depth"] == 1 and not r["finished"])
    assert batches["kind"] == "dataloader" and batches["description"].endswith(f"of epoch {epochs['done']}")

    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store), **env)
    resumed = b.run("%load_ext jupyter_pause\n%resume").ok().stdout
    assert "verdict: restored" in resumed and "run that cell again" in resumed
    done_before = len(b.value("losses"))
    assert 0 < done_before == epochs["done"] * 12 + batches["done"] < 36  # the position is the state's
    out = b.run(TRAINING).ok().stdout
    assert "continues where the checkpoint left it" in out
    assert "periodic" not in out  # periodic checkpoints in a loop print no summary
    assert b.value("losses") == expected  # bit-identical (float.hex), the same number of steps


@pytest.mark.integration
@pytest.mark.parametrize("flags", ["", "--async"])
def test_checkpoint_every_minutes_fires_inside_a_running_loop(start_kernel, tmp_path, flags):
    (tmp_path / "a").mkdir()
    store = tmp_path / "store"
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="every")
    a.run("%load_ext jupyter_pause\nimport time\nimport jupyter_pause as jp\ndone = []").ok()
    a.run(f"%checkpoint --every 0.005 {flags}").ok()  # 0.3 s
    out = a.run("for i in jp.steps(range(40)):\n    done.append(i)\n    time.sleep(0.05)").ok().stdout
    assert "periodic" not in out  # quiet inside the cell: the status widget shows them
    # --async: the loop went on while each was written; the last one commits after the cell.
    a.run("from jupyter_pause.session import background\nbackground.wait_for_background()").ok()
    assert a.run("print(done == list(range(40)))").ok().stdout.strip() == "True"
    inside = [m for m in _periodic_checkpoints(store, "every") if m.loops]
    assert len(inside) >= 2
    for manifest in inside:
        (record,) = manifest.loops
        assert record["label"] == "i" and 0 < record["done"] <= 40  # 40: the safe point after the last item
        assert record["description"] == f"step {record['done']}"
    a.run("%checkpoint --every off").ok()
