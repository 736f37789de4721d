"""Small training runs for tests of pausing inside a loop: shuffled DataLoader, dropout, AdamW,
StepLR, nested ``jp.steps`` loops over epochs and batches, each loss recorded; in this process
(``SETUP``, ``TRAIN``) or in a real kernel (``TRAINING_SETUP``, ``TRAINING``, and
``uninterrupted_losses``: the same run never paused)."""

from __future__ import annotations

#: Epochs and batches per epoch of ``TRAIN``.
EPOCHS, BATCHES = 3, 8

SETUP = f"""
import json, time
import torch
import jupyter_pause as jp
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
data = TensorDataset(torch.randn({BATCHES * 8}, 8), torch.randn({BATCHES * 8}, 1))
loader = DataLoader(data, batch_size=8, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
losses = []
pace = 0.0
"""

#: The cell that trains; re-run after a resume, it continues where the checkpoint was taken.
TRAIN = f"""
for epoch in jp.steps(range({EPOCHS})):
    model.train()
    for x, y in jp.steps(loader):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        time.sleep(pace)
    sched.step()
"""

#: Prints the losses so that equal floats print equal text (repr round-trips exactly).
LOSSES = "print(json.dumps([repr(v) for v in losses]))"

STEPS = EPOCHS * BATCHES


#: The loaders the training run is also tried with, each with two worker processes.
LOADERS = {
    "workers": "DataLoader(data, batch_size=8, shuffle=True, num_workers=2)",
    "persistent": "DataLoader(data, batch_size=8, shuffle=True, num_workers=2, persistent_workers=True)",
    "stateful": "StatefulDataLoader(data, batch_size=8, shuffle=True, num_workers=2)",
}


def setup_with(loader: str) -> str:
    """``SETUP`` with the loader ``LOADERS[loader]``."""
    text = SETUP.replace("DataLoader(data, batch_size=8, shuffle=True)", LOADERS[loader])
    assert text != SETUP
    if loader == "stateful":
        text = "from torchdata.stateful_dataloader import StatefulDataLoader\n" + text
    return text


TRAINING_SETUP = """
%load_ext jupyter_pause
import time
import torch
import jupyter_pause as jp
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0)
data = TensorDataset(torch.randn(96, 8), torch.randn(96, 1))
loader = DataLoader(data, batch_size=8, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
losses = []
"""

#: 3 epochs of 12 batches, a periodic checkpoint every 5 batches; re-run after a resume, it continues.
TRAINING = """
for epoch in jp.steps(range(3)):
    model.train()
    for x, y in jp.steps(loader, every=5):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item().hex())
        time.sleep(pace)
    sched.step()
"""


def uninterrupted_losses(start_kernel, tmp_path) -> list:
    """The losses of TRAINING run to its end without a pause, in a kernel (and store) of its own;
    makes the folders ``whole``, ``a`` and ``b`` under ``tmp_path`` for the kernels of a test."""
    for name in ("whole", "a", "b"):
        (tmp_path / name).mkdir()
    whole = start_kernel(tmp_path / "whole", JUPYTER_PAUSE_STORE=str(tmp_path / "other"), JUPYTER_PAUSE_SESSION="w")
    whole.run(TRAINING_SETUP + "pace = 0.0").ok()
    whole.run(TRAINING).ok()
    return whole.value("losses")
