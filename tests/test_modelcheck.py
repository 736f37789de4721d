"""jupyter_pause.proof.modelcheck: a fixed probe through a module, recorded at checkpoint, reproduced after."""

from __future__ import annotations

import copy
import io
import random
from collections.abc import Iterator
from dataclasses import asdict

import numpy as np
import pytest
import torch
from torch import nn

from jupyter_pause.proof import modelcheck
from jupyter_pause.proof.modelcheck import ModelCheck, is_module, record, reproduce


@pytest.fixture(autouse=True)
def keep_global_generators() -> Iterator[None]:
    state = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    torch.manual_seed(0)
    yield
    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])


def linear_stack() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))


def conv_net() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, kernel_size=3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 5))


def embedding_net() -> nn.Module:
    return nn.Sequential(nn.Embedding(50, 4), nn.Flatten(), nn.Linear(16, 3))


def regularised_net() -> nn.Module:
    return nn.Sequential(nn.Linear(5, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Dropout(0.5), nn.Linear(12, 2))


def _reloaded(module: nn.Module) -> nn.Module:
    """The module as another process would get it back: through a pickle of its state."""
    buf = io.BytesIO()
    torch.save(module, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


@pytest.mark.parametrize("build", [linear_stack, conv_net, embedding_net, regularised_net])
def test_record_then_reproduce_is_bit_identical(build) -> None:
    module = build()
    check = record(module)
    assert isinstance(check, ModelCheck), check
    assert check.values and check.shape[0] >= len(check.values)
    assert reproduce(module, check) == (True, "output bit-identical")
    assert reproduce(_reloaded(module), check) == (True, "output bit-identical")
    # the check as stored in a checkpoint (a plain dict) works the same
    assert reproduce(copy.deepcopy(module), ModelCheck(**asdict(check)))[0]


def test_probe_inputs_fit_each_kind_of_first_layer() -> None:
    assert record(linear_stack()).input == {"kind": "normal", "shape": [1, 6]}
    assert record(conv_net()).input == {"kind": "normal", "shape": [1, 3, 8, 8]}
    assert record(embedding_net()).input == {"kind": "indices", "shape": [8, 4], "high": 50}


def test_a_different_output_size_fails_the_check() -> None:
    module = linear_stack()
    check = record(module)
    check.shape = [check.shape[0] + 1]
    ok, how = reproduce(module, check)
    assert not ok and "recorded" in how


def test_the_probe_is_the_same_every_time() -> None:
    module = regularised_net()
    module.train()
    first = record(module)
    torch.manual_seed(12345)  # a different global stream changes nothing
    second = record(module)
    assert first.values == second.values


def test_record_does_not_consume_the_global_random_stream() -> None:
    module = regularised_net()
    torch.manual_seed(7)
    expected = torch.rand(5)
    torch.manual_seed(7)
    record(module)
    assert torch.equal(torch.rand(5), expected)


def test_record_leaves_train_flags_and_batchnorm_statistics_alone() -> None:
    module = regularised_net()
    module.train()
    module[3].eval()  # a mixed model: one submodule deliberately in eval mode
    flags = [m.training for m in module.modules()]
    bn = module[1]
    stats = (bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone())
    weights = {k: v.clone() for k, v in module.state_dict().items()}

    check = record(module)
    assert isinstance(check, ModelCheck)
    assert [m.training for m in module.modules()] == flags
    assert torch.equal(bn.running_mean, stats[0])
    assert torch.equal(bn.running_var, stats[1])
    assert torch.equal(bn.num_batches_tracked, stats[2])
    assert all(torch.equal(v, weights[k]) for k, v in module.state_dict().items())
    assert all(p.grad is None for p in module.parameters())

    module.eval()
    reproduce(module, check)
    assert not any(m.training for m in module.modules())


def test_a_changed_weight_fails_the_check() -> None:
    module = linear_stack()
    check = record(module)
    with torch.no_grad():
        module[4].weight[1, 5] += 1e-3  # the output layer: every probe row goes through it
    ok, how = reproduce(module, check)
    assert ok is False
    assert "differs" in how


def test_another_model_fails_the_check() -> None:
    check = record(linear_stack())
    ok, how = reproduce(linear_stack(), check)  # same architecture, other initial weights
    assert not ok and "differs" in how
    ok, how = reproduce(nn.Sequential(nn.Linear(6, 4)), check)
    assert not ok and "values" in how


def test_device_change_allows_the_dtype_tolerance_only() -> None:
    module = linear_stack()
    check = record(module)
    moved = ModelCheck(check.input, "cuda:0", check.dtype, [v * (1 + 1e-6) for v in check.values], check.shape)
    ok, how = reproduce(module, moved)
    assert ok and "within" in how
    far = ModelCheck(check.input, "cuda:0", check.dtype, [v + 1.0 for v in check.values], check.shape)
    ok, how = reproduce(module, far)
    assert not ok and "differs" in how
    # on the recorded device nothing but bit-identical output passes
    near_same_device = ModelCheck(check.input, check.device, check.dtype, moved.values, check.shape)
    assert reproduce(module, near_same_device)[0] is False


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.left = nn.Linear(4, 2)
        self.right = nn.Linear(4, 2)

    def forward(self, x, y):
        return self.left(x) + self.right(y)


def test_a_forward_needing_two_inputs_gives_a_reason() -> None:
    module = TwoInputs()
    module.train()
    result = record(module)
    assert isinstance(result, str)
    assert "failed" in result and "TypeError" in result
    assert module.training and module.left.training


class OnlyParameters(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))

    def forward(self, x):
        return x * self.scale


@pytest.mark.parametrize("module", [OnlyParameters(), nn.Sequential(nn.BatchNorm1d(4), nn.ReLU()), nn.LSTM(4, 4)])
def test_a_module_without_a_known_input_layer_gives_a_reason(module) -> None:
    result = record(module)
    assert isinstance(result, str)
    assert "in_features" in result


def test_is_module() -> None:
    assert is_module(nn.Linear(2, 2))
    assert is_module(linear_stack())
    assert not is_module(nn.Linear)
    assert not is_module(nn.Sequential)
    assert not is_module(torch.zeros(2))
    assert not is_module(torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1))

    class Raising:
        def __getattr__(self, name):
            raise RuntimeError("no attributes here")

    assert not is_module(Raising())


def test_only_the_first_values_are_kept() -> None:
    module = nn.Sequential(nn.Linear(3, 6000))  # one probe row: 6000 outputs
    check = record(module)
    assert len(check.values) == modelcheck.KEPT_VALUES
    assert check.shape == [6000]
    assert reproduce(module, check)[0]
