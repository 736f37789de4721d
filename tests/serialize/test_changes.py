"""Change detection between checkpoints: an in-place change is never missed, whatever wrote it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import jupyter_pause as jp
from jupyter_pause.serialize.digests import value_digest
from tests.support.processes import another_process

pytestmark = pytest.mark.usefixtures("new_process")


def _state() -> dict:
    torch.manual_seed(0)
    model = torch.nn.Linear(600, 600)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(4, 600)).sum().backward()
    opt.step()
    return {
        "model": model,
        "opt": opt,
        "t": torch.randn(1_000_000),
        "a": np.random.default_rng(0).random(300_000),
        "small": np.arange(100),
    }


def _bump_element(ns):
    ns["t"][123_456] += 1.0


def _through_data(ns):
    ns["t"].data[7] = 42.0  # .data does not bump the tensor's version counter


def _through_numpy_view(ns):
    ns["t"].numpy()[999_999] = -1.0  # nor does a write through a NumPy view of it


def _weight_under_no_grad(ns):
    with torch.no_grad():
        ns["model"].weight[0, 0] = 3.5


def _optimizer_moment(ns):
    state = next(iter(ns["opt"].state.values()))
    state["exp_avg"].view(-1)[5] = 1e-3


def _numpy_element(ns):
    ns["a"][12] = 0.25


def _numpy_through_a_view(ns):
    ns["a"].reshape(300, 1000)[299, 999] = 7.0


def _one_byte(ns):
    ns["t"].view(torch.uint8)[100] ^= 1  # the same shape, dtype and object; one bit differs


def _small_packed_array(ns):
    ns["small"][3] = -3


CHANGES = [
    _bump_element,
    _through_data,
    _through_numpy_view,
    _weight_under_no_grad,
    _optimizer_moment,
    _numpy_element,
    _numpy_through_a_view,
    _one_byte,
    _small_packed_array,
]


@pytest.mark.parametrize("change", CHANGES, ids=lambda f: f.__name__.strip("_"))
def test_an_in_place_change_is_never_missed(tmp_path, change):
    ns = _state()
    objects = {name: id(value) for name, value in ns.items()}
    first = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    change(ns)
    assert {name: id(value) for name, value in ns.items()} == objects
    second = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    assert 0 < second.stats["bytes_written"] < first.stats["bytes_written"]
    assert [v.digest for v in first.variables] != [v.digest for v in second.variables]
    _assert_resumes_as(tmp_path, second.id, ns)


def _assert_resumes_as(store, checkpoint_id: str, ns: dict) -> None:
    """A new process resuming ``checkpoint_id`` gets exactly the state ``ns`` holds now."""
    another_process()
    back: dict = {}
    jp.resume(checkpoint_id, store=str(store), session="s", namespace=back)
    assert torch.equal(back["t"], ns["t"]) and np.array_equal(back["a"], ns["a"])
    assert np.array_equal(back["small"], ns["small"])
    assert torch.equal(back["model"].weight, ns["model"].weight)
    moments = [s["exp_avg"] for s in back["opt"].state.values()]
    assert all(torch.equal(m, s["exp_avg"]) for m, s in zip(moments, ns["opt"].state.values(), strict=True))


def test_nothing_changed_writes_only_the_small_records(tmp_path):
    ns = _state()
    first = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    second = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    assert second.stats["bytes_reused"] >= first.stats["bytes_written"] - 100_000
    assert second.stats["bytes_written"] < 100_000  # the checks blob: its probe value is new
    assert [v.digest for v in first.variables] == [v.digest for v in second.variables]


def test_value_digests_reusing_blob_hashes_match_digests_from_scratch(tmp_path):
    """The checkpoint takes tensor digests from its blob hashes; a fresh digest must agree."""
    ns = _state()
    ns["view"] = ns["t"][10:20]  # part of a storage: digested from its own bytes
    ns["fortran"] = np.asfortranarray(np.arange(40_000, dtype=np.float64).reshape(200, 200))
    manifest = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    for record in manifest.variables:
        assert record.digest == value_digest(ns[record.name]), record.name


@pytest.mark.parametrize("change", CHANGES, ids=lambda f: f.__name__.strip("_"))
def test_an_in_place_change_after_a_resume_is_never_missed(tmp_path, change):
    """A resume maps large blobs; the next checkpoint trusts page flags, not bytes, for those
    still unwritten. Every way of writing must still show up as a change."""
    jp.checkpoint(store=str(tmp_path), session="s", namespace=_state())
    another_process()
    ns: dict = {}
    jp.resume(store=str(tmp_path), session="s", namespace=ns)
    unchanged = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    assert unchanged.stats["bytes_unread"] >= 4_000_000 + 2_400_000  # t and a, at least: not hashed
    change(ns)
    second = jp.checkpoint(store=str(tmp_path), session="s", namespace=ns).manifest
    assert second.stats["bytes_written"] > unchanged.stats["bytes_written"]
    assert [v.digest for v in second.variables] != [v.digest for v in unchanged.variables]
    assert all(v.digest == value_digest(ns[v.name]) for v in second.variables)
    _assert_resumes_as(tmp_path, second.id, ns)
