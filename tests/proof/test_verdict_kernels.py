"""The four verdicts, each produced for real with kernels: restored, partial, fresh, live."""

from __future__ import annotations

import json
import re

import pytest

from jupyter_pause.store.layout import pool_key
from tests.support.processes import OLDER_PROCESSOR, best_cpu_capability

pytestmark = pytest.mark.integration

STATE = r"""
%load_ext jupyter_pause
import torch
torch.manual_seed(11)
model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model(torch.randn(4, 5)).sum().backward(); opt.step()
table = {"run": list(range(500)), "score": [i * 0.5 for i in range(500)]}
label = "experiment 3"
"""


def _manifest(store):
    (path,) = store.glob("sessions/v/checkpoints/*.json")
    return json.loads(path.read_text())["manifest"]


def test_live_then_restored_after_sigkill(start_kernel, tmp_path):
    store = tmp_path / "store"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="v")
    a.run(STATE + "%checkpoint").ok()
    live = a.run("%resume --check").ok().stdout
    assert live.startswith("verdict: live") and "nothing was released" in live
    a.kill()

    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="v")
    out = b.run("%load_ext jupyter_pause\n%resume").ok().stdout
    assert "verdict: restored" in out and "model check model: reproduces: output bit-identical" in out
    assert "4 of 4 variable(s) match" in out
    # A change made after the resume is the user's work, not a restore problem.
    b.run("table['run'].append(-1)").ok()
    again = b.run("%resume --check").ok().stdout
    assert again.startswith("verdict: restored") and "table: changed since the resume" in again
    reports = list(store.glob("sessions/v/reports/*.json"))
    assert len(reports) == 1
    report = json.loads(reports[0].read_text())
    assert report["verdict"] == "restored" and report["durations"]["resume_to_next_cell"] > 0


def test_partial_when_a_variable_blob_is_gone(start_kernel, tmp_path):
    store = tmp_path / "store"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="v")
    a.run(STATE + "%checkpoint").ok()
    a.kill()
    manifest = _manifest(store)
    table = next(v for v in manifest["variables"] if v["name"] == "table")
    (store / pool_key(table["blob"]["key"])).unlink()

    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="v")
    out = b.run("%load_ext jupyter_pause\n%resume --allow-partial").ok().stdout
    assert "verdict: partial" in out and "verdict: restored" not in out
    assert "table: missing (its data blob is missing or damaged)" in out
    assert "not back: table" in out
    assert b.value("label") == "experiment 3"  # the rest did come back


def test_fresh_when_cells_were_merely_rerun(start_kernel, tmp_path):
    store = tmp_path / "store"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="v")
    a.run(STATE + "%checkpoint").ok()
    a.close()
    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="v")
    b.run(STATE).ok()  # the same cells, the same seed, the same values: still not a resume
    out = b.run("%resume --check").ok().stdout
    assert out.startswith("verdict: fresh")
    assert "holds none of the checkpoint's state" in out and "run %resume" in out


def test_check_without_any_checkpoint_is_a_clear_message(start_kernel, tmp_path):
    (tmp_path / "a").mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(tmp_path / "empty"), JUPYTER_PAUSE_SESSION="v")
    result = a.run("%load_ext jupyter_pause\n%resume --check")
    assert result.ename == "UsageError"
    assert "no checkpoint of session 'v'" in result.error and "run %checkpoint first" in result.error
    assert "Traceback" not in result.stdout


MODELS = r"""
%load_ext jupyter_pause
import torch
from torch import nn
from diffusers import UNet2DModel
from peft import LoraConfig, get_peft_model
from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel
from transformers import T5Config, T5ForConditionalGeneration
torch.manual_seed(0)
small = dict(num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
bert = BertForSequenceClassification(BertConfig(vocab_size=100, hidden_size=16, **small))
lora = get_peft_model(bert, LoraConfig(r=2, target_modules=["query", "value"], task_type="SEQ_CLS"))
del bert
tokens = dict(vocab_size=100, bos_token_id=0, eos_token_id=0, decoder_start_token_id=0)
gpt2 = GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, n_positions=32, **tokens))
t5 = T5ForConditionalGeneration(T5Config(d_model=16, d_ff=32, d_kv=8, num_layers=1, num_heads=2, **tokens))
unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=1, block_out_channels=(8, 16), layers_per_block=1,
                   norm_num_groups=4, down_block_types=("DownBlock2D",) * 2, up_block_types=("UpBlock2D",) * 2)
compiled = torch.compile(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), backend="eager")
mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 10))
conv = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.Flatten(), nn.LazyLinear(5))
conv(torch.randn(2, 3, 16, 16))  # materialises the lazy layer
encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(d_model=32, nhead=4, batch_first=True), num_layers=2).eval()
dropout_eval = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.5), nn.Linear(16, 2)).eval()
dropout_train = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.5), nn.Linear(16, 2)).train()

class NeedsTable(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x, table):
        return self.lin(x) * table["scale"]

needs_table = NeedsTable()
"""

TRAINED = r"""
opt = torch.optim.AdamW(gpt2.parameters(), lr=1e-3)
ids = torch.randint(0, 100, (2, 12))
gpt2(input_ids=ids, labels=ids).loss.backward()  # real calls: their signatures are recorded
opt.step()
t5(input_ids=ids, labels=ids)
unet(torch.randn(2, 1, 8, 8), torch.tensor([3, 7]))
compiled(torch.randn(3, 4))
needs_table(torch.randn(2, 4), {"scale": 2.0})
conv(torch.randn(2, 3, 16, 16))  # real calls in a watched cell: the checks replay their shapes
encoder(torch.randn(2, 10, 32))
del ids
"""

PROVEN = ("lora", "gpt2", "t5", "unet", "compiled", "dropout_eval", "dropout_train", "mlp", "conv", "encoder")


def test_the_models_people_train_are_proven_after_a_resume_on_another_processor(start_kernel, tmp_path):
    """Checkpointed on this machine's best CPU kernels, resumed in a kernel that computes like an
    older processor: the weights are the same, the outputs agree to the last bits fp32 allows,
    and that is a true resume, with the processor change named."""
    store = tmp_path / "store"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="m")
    a.run(MODELS, timeout=300).ok()
    a.run(TRAINED).ok()
    saved = a.run("%checkpoint").ok().stdout
    # named at checkpoint, in the summary and the status widget, not only at resume
    assert "the restore test cannot prove model needs_table: its forward needs 'table', a dict" in saved
    for name in PROVEN:
        assert f"model {name}:" not in saved
    assert "cannot prove model needs_table" in a.value("repr(__import__('jupyter_pause').status(widget=False))")
    after = a.value("torch.rand(3).tolist()")  # the checks drew nothing from the session's stream
    a.kill()

    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="m", **OLDER_PROCESSOR)
    out = b.run("%load_ext jupyter_pause\n%resume", timeout=300).ok().stdout
    assert b.value("__import__('torch').backends.cpu.get_cpu_capability()") == "DEFAULT"
    for name in PROVEN:
        assert re.search(rf"model check {name}: reproduces: output (bit-identical|within fp32 tolerance)", out), out
    best = best_cpu_capability()
    if best != "DEFAULT":  # a machine whose best kernels are the plain ones has no other processor to be
        assert f"resumed on another processor ({best} -> DEFAULT): model outputs " in out, out
    assert "model check needs_table: not possible: its forward needs 'table'" in out
    assert "verdict: restored" in out, out
    assert b.value("torch.rand(3).tolist()") == after
    assert b.value("[dropout_train.training, dropout_train[1].training, dropout_eval.training]") == [True, True, False]


SCALED = r"""
%load_ext jupyter_pause
import torch
from torch import nn
torch.manual_seed(3)
SCALE = 2.0

class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        return self.lin(x) * SCALE

scaled = Scaled()
scaled(torch.randn(2, 8))
"""


def test_a_model_that_computes_something_else_on_another_processor_is_partial(start_kernel, tmp_path):
    """Its forward reads a notebook global the checkpoint left out, set otherwise in the new
    kernel: its weights are back, its outputs are not, and no tolerance hides that."""
    store = tmp_path / "store"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    a = start_kernel(tmp_path / "a", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="s")
    a.run(SCALED).ok()
    a.run("%checkpoint --exclude SCALE").ok()
    a.kill()

    b = start_kernel(tmp_path / "b", JUPYTER_PAUSE_STORE=str(store), JUPYTER_PAUSE_SESSION="s", **OLDER_PROCESSOR)
    out = b.run("SCALE = 3.0\n%load_ext jupyter_pause\n%resume").ok().stdout
    assert "verdict: partial" in out, out
    assert re.search(
        r"model check scaled: FAILED: output differs \(largest difference [0-9.e-]+, beyond fp32 tolerance", out
    )
    assert "not back: model check of scaled" in out
    assert "1 of 1 model check(s) FAILED" in out
