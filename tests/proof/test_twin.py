"""The eval-mode twin of a module tree (``proof.twin``): it computes what the module computes in
eval mode, on the very same tensors, and leaves the live modules as they are; a tree it cannot
stand in for gets no twin."""

from __future__ import annotations

import functools

import pytest
import torch
from torch import nn

from jupyter_pause.proof import twin


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.Dropout(0.5), nn.Linear(16, 3)).train()


def test_the_twin_computes_the_eval_output_on_the_same_tensors_and_leaves_the_modes_alone():
    module = _net()
    module[1].eval()  # a mixed model: one submodule deliberately in eval mode
    flags = [m.training for m in module.modules()]
    x = torch.randn(4, 6)
    stand_in = twin.of(module)

    assert type(stand_in) is nn.Sequential and stand_in is not module
    assert not any(m.training for m in stand_in.modules())
    assert [m.training for m in module.modules()] == flags
    live = dict(module.named_parameters()) | dict(module.named_buffers())
    shared = dict(stand_in.named_parameters()) | dict(stand_in.named_buffers())
    assert live.keys() == shared.keys() and all(shared[k] is t for k, t in live.items())
    with torch.no_grad():
        got = stand_in(x)
        module.eval()
        expected = module(x)
    assert torch.equal(got, expected)


class Caching(nn.Module):
    """A forward that assigns: a buffer, a plain attribute, an entry of a list it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4))
        self.seen: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.scale = self.scale * 2  # a new tensor in the buffer's place
        self.last_shape = tuple(x.shape)
        self.seen.append(len(x))
        return self.linear(x) * self.scale


def test_what_a_pass_of_the_twin_assigns_lands_in_the_twin():
    module = Caching()
    scale = module.scale
    stand_in = twin.of(module)
    with torch.no_grad():
        stand_in(torch.ones(2, 4))
    assert module.scale is scale and torch.equal(module.scale, torch.ones(4))
    assert not hasattr(module, "last_shape") and module.seen == []
    assert torch.equal(stand_in.scale, torch.full((4,), 2.0)) and stand_in.seen == [2]


def test_a_submodule_shared_in_the_tree_has_one_twin():
    shared = nn.Linear(3, 3)
    module = nn.Sequential(shared, nn.ReLU(), shared)
    stand_in = twin.of(module)
    assert stand_in[0] is stand_in[2] and stand_in[0] is not shared


class KernelHolder(nn.Module):
    """Holds a parameterless module in a plain dict, past its submodules, as a Hugging Face attention
    layer holds its kernel functions, and a module in a plain attribute; its pass goes through both."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        object.__setattr__(self, "kernels", {"act": nn.Dropout(0.5)})
        object.__setattr__(self, "shortcut", self.linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernels["act"](self.shortcut(x))


def test_a_module_held_in_a_plain_attribute_or_dict_is_swapped_for_its_twin():
    module = KernelHolder().train()
    stand_in = twin.of(module)
    assert stand_in.shortcut is stand_in.linear and stand_in.linear is not module.linear
    act = stand_in.kernels["act"]
    assert act is not module.kernels["act"] and not act.training and module.kernels["act"].training
    x = torch.ones(2, 4)
    with torch.no_grad():
        assert torch.equal(stand_in(x), module.linear(x))  # dropout off: the twin's own, in eval mode


def _bound_method(module: nn.Sequential) -> None:
    object.__setattr__(module, "head", module[3].forward)


def _partial(module: nn.Sequential) -> None:
    object.__setattr__(module, "head", functools.partial(nn.Module.__call__, module[3]))


def _closure(module: nn.Sequential) -> None:
    last = module[3]
    object.__setattr__(module, "head", lambda x: last(x))


def _too_long_to_look_through(module: nn.Sequential) -> None:
    module.history = list(range(twin._LONGEST + 1))


def _container_of_its_own_class(module: nn.Sequential) -> None:
    class Pair(tuple):
        pass

    object.__setattr__(module, "pair", Pair((module[0], module[3])))


@pytest.mark.parametrize(
    "reach", [_bound_method, _partial, _closure, _too_long_to_look_through, _container_of_its_own_class]
)
def test_a_tree_that_reaches_a_module_where_no_twin_can_be_put_gets_none(reach):
    module = _net()
    assert twin.of(module) is not None
    reach(module)
    assert twin.of(module) is None  # that module would run in its own mode: the check switches the live ones


def test_a_short_list_of_numbers_is_looked_through():
    module = _net()
    module.history = [0.5, 0.25]
    assert twin.of(module) is not None


@pytest.mark.filterwarnings("ignore:`torch.jit.script:DeprecationWarning")
def test_compiled_and_scripted_modules_and_an_uninitialised_lazy_one_get_no_twin():
    assert twin.of(torch.compile(_net())) is None  # its forward closes over the original module
    assert twin.of(torch.jit.script(nn.Linear(2, 2))) is None
    lazy = nn.Sequential(nn.LazyLinear(4), nn.ReLU())
    assert twin.of(lazy) is None  # its first pass would make its parameters in the twin only
    with torch.no_grad():
        lazy(torch.ones(1, 3))
    assert twin.of(lazy) is not None
