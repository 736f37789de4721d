"""A 2026 fine-tuning notebook, checkpointed on node A and resumed on node B.

``BUILD`` is the notebook's cell: a dataset loaded from the Hugging Face cache and mapped through a
tokenizer trained here, a tiny BERT fine-tuned by a ``transformers.Trainer`` (on ``accelerate``), a
model, optimizer and dataloader prepared by ``accelerate`` with an iterator over it in the middle of
its epoch, a Lightning module fitted by its trainer, polars and duckdb frames, xgboost and lightgbm
boosters, and a plain shuffled DataLoader iterator mid-epoch. Nothing is downloaded: the data file
is written by the cell, the models are built from configs.

``PROBES`` are what the next cells look at, in order: the iterators are drained (their remaining
batches), and ``rng`` (last) draws from every global random stream, which must then equal an
uninterrupted run's draws.

The nodes it runs on are ``tests.support.nodes.Node``.
"""

from __future__ import annotations

from typing import Any

#: The libraries the notebook imports (a test is skipped where one is missing).
LIBRARIES = ("datasets", "transformers", "accelerate", "lightning", "polars", "duckdb", "xgboost", "lightgbm")

BUILD = r"""
import json, random, warnings
warnings.filterwarnings("ignore")
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from datasets import load_dataset
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (BertConfig, BertForSequenceClassification, DataCollatorWithPadding,
                          PreTrainedTokenizerFast, Trainer, TrainingArguments)
from accelerate import Accelerator
import lightning as L
import polars as pl
import duckdb
import xgboost as xgb
import lightgbm as lgb

torch.manual_seed(0); random.seed(0); np.random.seed(0)
words = "the quick brown fox jumps over a lazy dog while cats sleep and birds sing".split()
texts = [" ".join(random.choice(words) for _ in range(6)) for _ in range(64)]
with open("train.jsonl", "w") as f:
    for i, t in enumerate(texts):
        f.write(json.dumps({"text": t, "label": i % 2}) + "\n")
raw = load_dataset("json", data_files="train.jsonl", split="train")
bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
bpe.pre_tokenizer = pre_tokenizers.Whitespace()
bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=80, special_tokens=["[UNK]", "[PAD]", "[CLS]", "[SEP]"]))
tok = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                              sep_token="[SEP]")
tokenized = raw.map(lambda b: tok(b["text"], truncation=True, max_length=16), batched=True)
config = BertConfig(vocab_size=80, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                    max_position_embeddings=32)
model = BertForSequenceClassification(config)
args = TrainingArguments(output_dir="out", max_steps=3, per_device_train_batch_size=8, report_to=[], use_cpu=True,
                         save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=0)
trainer = Trainer(model=model, args=args, train_dataset=tokenized, data_collator=DataCollatorWithPadding(tok))
trainer.train()

accelerator = Accelerator(cpu=True)
net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
xs = torch.randn(40, 4)
ys = torch.randn(40, 1)
anet, aopt, aloader = accelerator.prepare(net, opt, DataLoader(TensorDataset(xs, ys), batch_size=4, shuffle=True))
aiter = iter(aloader)
abatch = next(aiter)

class Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)
    def forward(self, x):
        return self.layer(x)
    def training_step(self, batch, i):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

lit = Lit()
ldl = DataLoader(TensorDataset(xs, ys), batch_size=8, shuffle=True)
ltrainer = L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False)
ltrainer.fit(lit, ldl)

frame = pl.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
con = duckdb.connect()
con.execute("CREATE TABLE t AS SELECT range AS i, range * 2 AS j FROM range(10)")
booster = xgb.train({"max_depth": 2, "seed": 0}, xgb.DMatrix(xs.numpy(), label=ys.numpy().ravel()), num_boost_round=3)
lgbm = lgb.train({"num_leaves": 4, "verbose": -1, "min_data_in_leaf": 2}, lgb.Dataset(xs.numpy(), ys.numpy().ravel()),
                 num_boost_round=3)
plain = DataLoader(TensorDataset(torch.arange(20.0)), batch_size=3, shuffle=True)
plain_it = iter(plain)
first = next(plain_it)
"""

#: What the next cells look at, per variable (in this order: ``rng`` draws last).
PROBES = {
    "raw": "[raw[5], len(raw), raw.column_names]",
    "tokenized": "[tokenized[3]['input_ids'], len(tokenized)]",
    "tok": "tok(['a lazy fox', 'the dog'], padding='longest')['input_ids']",
    "bpe": "bpe.encode('quick brown birds').ids",
    "trainers": "trainers.BpeTrainer(vocab_size=10).vocab_size",
    "trainer": "[trainer.state.global_step, len(trainer.get_train_dataloader()), trainer.train_dataset[0]['label']]",
    "model": "model(torch.tensor([[2, 5, 7, 3]])).logits.tolist()",
    "accelerator": "[accelerator.gradient_state.__dict__ is aloader.gradient_state.__dict__, "
    "accelerator.state.__dict__ is type(accelerator.state)._shared_state, accelerator.state.num_processes]",
    "anet": "anet(xs[:2]).tolist()",
    "aopt": "aopt.state_dict()['param_groups'][0]['lr']",
    "aiter": "[batch[0].sum().item() for batch in aiter]",
    "abatch": "abatch[0].tolist()",
    "lit": "lit(xs[:2]).tolist()",
    "ltrainer": "[ltrainer.global_step, ltrainer.current_epoch]",
    "frame": "frame.to_dicts()",
    "con": "con.execute('SELECT sum(j), count(*) FROM t').fetchall()",
    "booster": "booster.predict(xgb.DMatrix(xs[:3].numpy())).tolist()",
    "lgbm": "lgbm.predict(xs[:3].numpy()).tolist()",
    "plain_it": "[batch[0].tolist() for batch in plain_it]",
    "first": "first[0].tolist()",
    "rng": "[torch.rand(2).tolist(), torch.randint(0, 1000, (3,)).tolist(), random.random(), np.random.rand()]",
}


def probe(namespace: dict[str, Any]) -> dict[str, str]:
    """Evaluate ``PROBES`` in ``namespace``, in order: what each showed (its repr), or what it raised."""
    seen = {}
    for name, expression in PROBES.items():
        try:
            seen[name] = repr(eval(expression, namespace))  # the corpus's own probes, never user input
        except Exception as e:  # what raises is part of what a user sees
            seen[name] = f"raises {type(e).__name__}: {e}"
    return seen
