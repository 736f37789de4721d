"""Weights loaded from model files are verified references, not copies (``store.modelfiles``,
``store.references``, ``serialize.filerefs``, ``session.modelfiles``).

Real tiny models of four families are saved with ``save_pretrained`` and loaded back with
``from_pretrained``, as a notebook would; a checkpoint then names every loaded byte as a range
of the model file, which goes into the store's pool once, in the background; a tensor changed
after load is copied; a resume in a new process reads the ranges back, verified, and is
``restored``; a damaged pool file is refused; cleanup keeps what is referenced.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import pytest
import torch
import xxhash

import jupyter_pause as jp
from jupyter_pause.config import PauseConfig
from jupyter_pause.errors import CheckpointDamaged
from jupyter_pause.hub.keys import user_key
from jupyter_pause.session import modelfiles as session_modelfiles
from jupyter_pause.store import mapping, modelfiles, signing
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.integrity import check
from jupyter_pause.store.layout import file_index_key, pool_key
from jupyter_pause.store.manifest import Manifest
from jupyter_pause.store.retention import collect
from jupyter_pause.store.storage import Store
from tests.support.processes import another_process
from tests.support.tensorfiles import hub_cached

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

pytestmark = pytest.mark.usefixtures("new_process", "no_pause_env")

ALICE = user_key("a hub secret of at least thirty-two characters 3b9e", "alice")


def _tiny(family: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    t = transformers
    if family == "gpt2":
        return t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=300, n_positions=32))
    if family == "bert":
        config = t.BertConfig(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=300
        )
        return t.BertModel(config)
    if family == "llama":
        config = t.LlamaConfig(
            num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=300
        )
        return t.LlamaForCausalLM(config)
    config = t.T5Config(num_layers=2, d_model=32, d_ff=64, num_heads=2, d_kv=16, vocab_size=300)
    return t.T5ForConditionalGeneration(config)


def _saved(tmp_path: Path, family: str, seed: int = 0) -> str:
    folder = tmp_path / (f"model-{family}" if not seed else f"model-{family}-{seed}")
    _tiny(family, seed).save_pretrained(folder)
    return str(folder)


def _load(folder: str) -> torch.nn.Module:
    auto = transformers.AutoModel if "bert" in folder else transformers.AutoModelForCausalLM
    if "t5" in folder:
        auto = transformers.AutoModelForSeq2SeqLM
    return auto.from_pretrained(folder).eval()


def _take(url: str, session: str, key: str | None = None, **namespace: object) -> Manifest:
    config = PauseConfig(signing_key=key) if key else PauseConfig()
    return jp.checkpoint(store=url, session=session, namespace=namespace, config=config).manifest


def _referenced(manifest: Manifest) -> int:
    return sum(manifest.arrays[k].nbytes for k in manifest.arrays if manifest.arrays[k].blob in manifest.references)


def _loaded_bytes(model: torch.nn.Module) -> int:
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in model.state_dict().values()}
    return sum(storages.values())


_RESUME = """
import json, sys, torch
import jupyter_pause as jp
ns = {}
cycle = jp.resume_and_verify(store=sys.argv[1], session=sys.argv[2], namespace=ns)
model = ns["model"]
sums = {k: float(v.double().sum()) for k, v in model.state_dict().items()}
print(json.dumps({"kind": cycle.verdict.kind, "summary": cycle.verdict.summary(), "sums": sums,
                  "checkpoint": cycle.result.manifest.id, "notes": cycle.result.notes, "step": ns.get("step")}))
"""


def _resume_elsewhere(url: str, session: str, key: str | None = None) -> dict:
    """Resume in a new Python process (signing with ``key``); what its restore test says, and the
    model's weights' sums."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    if key:
        env["JUPYTER_PAUSE_SIGNING_KEY"] = key
    done = subprocess.run(
        [sys.executable, "-c", _RESUME, url, session], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("family", ["gpt2", "bert", "llama", "t5"])
def test_every_loaded_byte_is_referenced_and_the_file_goes_into_the_pool_once(tmp_path, family):
    folder = _saved(tmp_path, family)
    model = _load(folder)
    url = str(tmp_path / "store")
    manifest = _take(url, "tune", model=model)

    assert _referenced(manifest) >= _loaded_bytes(model) > 0  # a buffer equal to a file's tensor too
    assert manifest.format == 3 and manifest.stats["bytes_written"] < _loaded_bytes(model) / 2
    (file,) = manifest.model_files
    store = Store(url)
    size = os.path.getsize(os.path.join(folder, "model.safetensors"))
    assert store.sizes([pool_key(file)])[pool_key(file)] == size
    assert store.exists(file_index_key(file, manifest.hash))
    assert check(store, manifest) == {}


def test_a_dead_weak_proxy_beside_a_mapped_model_is_passed_over(tmp_path):
    """Asking a weak proxy whose object is gone for its type raises; the search for the model
    files a checkpoint offers passes it over and still finds the model's file."""

    class Gone:
        pass

    folder = _saved(tmp_path, "llama")
    model = _load(folder)
    gone = weakref.proxy(Gone())
    found = session_modelfiles.loaded([gone, model])
    assert {Path(path).resolve().parent for path in found} == {Path(folder).resolve()}


def test_a_checkpoint_reads_the_processs_mappings_once(tmp_path, monkeypatch):
    """Which model files the kernel loaded, which tensors still map their bytes unwritten, and
    which memory may have its writes tracked: one reading of ``/proc/self/maps`` answers all
    three (a kernel with torch loaded maps thousands of regions)."""
    model = _load(_saved(tmp_path, "llama"))
    url = str(tmp_path / "store")
    first = _take(url, "tune", model=model, step=1)  # the file is indexed, and verified
    reads: list[int] = []
    real = mapping.process_maps
    monkeypatch.setattr(mapping, "process_maps", lambda: reads.append(1) or real())
    second = _take(url, "tune", model=model, step=2, extra=torch.randn(1 << 19))  # its writes to be tracked
    assert set(second.references) == set(first.references) and _referenced(second) >= _loaded_bytes(model)
    assert len(reads) == 1


def test_a_tensor_changed_after_load_is_copied_and_the_rest_referenced(tmp_path):
    folder = _saved(tmp_path, "llama")
    unchanged = _take(str(tmp_path / "store"), "tune", model=_load(folder))
    model = _load(folder)
    with torch.no_grad():
        model.lm_head.weight[0, 0] += 1.0  # written once: no longer the file's bytes
    manifest = _take(str(tmp_path / "store"), "tune", model=model)

    changed = xxhash.xxh3_128_hexdigest(model.lm_head.weight.detach().numpy().tobytes())
    assert changed not in manifest.references  # copied (into a pack of small arrays), not referenced
    assert _referenced(manifest) == _referenced(unchanged) - model.lm_head.weight.nbytes


def test_a_resume_in_a_new_process_reads_the_references_and_is_restored(tmp_path, store_url):
    model = _load(_saved(tmp_path, "gpt2"))
    with torch.no_grad():
        model.transformer.ln_f.bias.add_(0.5)  # one changed tensor travels as a copy
    manifest = _take(store_url, "tune", model=model)
    assert manifest.references and _referenced(manifest) < _loaded_bytes(model)
    if store_url.startswith("memory://"):
        return  # a memory store lives in this process only
    shutil.rmtree(tmp_path / "model-gpt2")  # no local copy: the pool gives the bytes

    found = _resume_elsewhere(store_url, "tune")
    assert found["kind"] == "restored", found["summary"]
    assert found["sums"] == pytest.approx({k: float(v.double().sum()) for k, v in model.state_dict().items()}, abs=0)


def test_a_damaged_pool_file_is_refused_by_digest(tmp_path):
    folder = _saved(tmp_path, "bert")
    url = str(tmp_path / "store")
    manifest = _take(url, "tune", model=_load(folder))
    shutil.rmtree(folder)
    (file,) = manifest.model_files
    path = Path(Store(url).path(pool_key(file)))
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # a byte of the last tensor
    path.write_bytes(bytes(data))

    another_process()
    with pytest.raises(CheckpointDamaged, match="checksum mismatch"):
        jp.resume(store=url, session="tune", namespace={})
    assert check(Store(url), manifest)


def test_a_local_copy_of_the_file_stands_in_for_a_damaged_pool(tmp_path):
    folder = _saved(tmp_path, "bert")
    url = str(tmp_path / "store")
    model = _load(folder)
    manifest = _take(url, "tune", model=model)
    (file,) = manifest.model_files
    Path(Store(url).path(pool_key(file))).write_bytes(b"\0" * manifest.model_files[file].size)

    another_process()
    namespace: dict = {}
    result = jp.resume(store=url, session="tune", namespace=namespace)
    restored, original = namespace["model"].state_dict(), model.state_dict()
    assert restored.keys() == original.keys() and all(torch.equal(restored[k], original[k]) for k in original)
    (said,) = [
        n for n in result.notes if n.startswith(f"model file {file[:12]}")
    ]  # the resume names what it passed over
    assert "read from its copy where it was read" in said and "passed over the store's pool: checksum mismatch" in said


def test_a_pause_after_the_upload_writes_only_what_changed(tmp_path):
    model = _load(_saved(tmp_path, "llama"))
    url = str(tmp_path / "store")
    first = _take(url, "tune", model=model, step=1)
    second = _take(url, "tune", model=model, step=2)
    assert second.stats["bytes_written"] < 0.2 * first.stats["bytes_total"] + 64 * 1024
    assert set(second.references) == set(first.references)


def test_a_pause_racing_the_upload_waits_for_the_rest_of_it(tmp_path, monkeypatch):
    model = _load(_saved(tmp_path, "gpt2"))
    url = str(tmp_path / "store")
    release = threading.Event()
    started = threading.Event()
    real = modelfiles.upload

    def slow(store, path, index):
        started.set()
        assert release.wait(30)
        real(store, path, index)

    monkeypatch.setattr(modelfiles, "upload", slow)
    taking = {}
    thread = threading.Thread(target=lambda: taking.setdefault("m", _take(url, "tune", model=model)))
    thread.start()
    assert started.wait(30)
    thread.join(1.0)
    assert thread.is_alive() and not Catalog(Store(url)).checkpoints("tune")  # nothing committed before the file
    release.set()
    thread.join(60)
    manifest = taking["m"]
    assert check(Store(url), manifest) == {}


def test_a_failed_upload_commits_nothing_and_says_what_to_do(tmp_path, monkeypatch):
    model = _load(_saved(tmp_path, "gpt2"))
    url = str(tmp_path / "store")

    def broken(store, path, index):
        raise OSError("disk full")

    monkeypatch.setattr(modelfiles, "upload", broken)
    with pytest.raises(jp.PauseError, match="JUPYTER_PAUSE_MODEL_FILES=off"):
        _take(url, "tune", model=model)
    assert not Catalog(Store(url)).checkpoints("tune")
    monkeypatch.setenv("JUPYTER_PAUSE_MODEL_FILES", "off")
    manifest = _take(url, "tune", model=model)
    assert not manifest.references and manifest.format == 2


def test_a_second_session_with_the_same_base_model_grows_the_store_little(tmp_path):
    folder = _saved(tmp_path, "llama")
    url = str(tmp_path / "store")
    _take(url, "a", model=_load(folder))
    store = Store(url)
    before = sum(e.size for e in store.list("").values())
    another_process()
    modelfiles.forget()
    second = _take(url, "b", model=_load(folder))
    grown = sum(e.size for e in store.list("").values()) - before
    assert second.references and grown < 0.5 * os.path.getsize(os.path.join(folder, "model.safetensors"))


def test_gc_keeps_referenced_files_and_drops_unreferenced_ones(tmp_path):
    url = str(tmp_path / "store")
    kept = _take(url, "a", model=_load(_saved(tmp_path, "gpt2")))
    gone = _take(url, "b", model=_load(_saved(tmp_path, "bert")))
    store = Store(url)
    store.delete([f"sessions/b/checkpoints/{gone.id}.json"])
    collect(Catalog(store), "a", grace=0.0)

    (keep,) = kept.model_files
    (drop,) = set(gone.model_files) - {keep}  # the first model is still mapped: its file is offered too
    held = store.sizes(
        [pool_key(keep), file_index_key(keep, "xxh3_128"), pool_key(drop), file_index_key(drop, "xxh3_128")]
    )
    assert [size is not None for size in held.values()] == [True, True, False, False]
    another_process()
    namespace: dict = {}
    jp.resume(store=url, session="a", namespace=namespace)
    assert check(store, kept) == {}


class _Experts(torch.nn.Module):
    """Experts stored one tensor each in a model file and fused into one at load (``torch.cat``),
    as mixture-of-experts models load them; the folder named in ``name_or_path``."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        from safetensors.torch import load_file

        loaded = load_file(os.path.join(folder, "model.safetensors"))
        self.experts = torch.nn.Parameter(torch.cat([loaded[f"expert.{i}"] for i in range(EXPERTS)]))
        self.norm = torch.nn.Parameter(loaded["norm"])
        self.name_or_path = folder

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.experts.view(EXPERTS, 64, 32).sum(0) * self.norm


EXPERTS = 4


def _experts_file(tmp_path: Path) -> str:
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(5)
    tensors = {f"expert.{i}": torch.randn(64, 32, generator=gen) for i in range(EXPERTS)}
    tensors["norm"] = torch.randn(32, generator=gen)
    folder = tmp_path / "experts"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    return str(folder)


def test_a_tensor_fused_from_several_file_tensors_is_their_ranges_and_resumes_exactly(tmp_path):
    model = _Experts(_experts_file(tmp_path))
    url = str(tmp_path / "store")
    manifest = _take(url, "moe", model=model)
    fused = xxhash.xxh3_128_hexdigest(model.experts.detach().numpy().tobytes())
    ranges = manifest.references[fused]
    assert [r.tensor for r in ranges] == [f"expert.{i}" for i in range(EXPERTS)]
    assert [r.stop - r.start for r in ranges] == [64 * 32 * 4] * EXPERTS
    expected = {k: v.detach().clone() for k, v in model.state_dict().items()}
    another_process()
    target: dict = {}
    cycle = jp.resume_and_verify(store=url, session="moe", namespace=target, write_report=False)
    assert cycle.verdict.kind == "restored", cycle.verdict.details
    got = target["model"].state_dict()
    assert got.keys() == expected.keys() and all(torch.equal(got[k], v) for k, v in expected.items())


def _hub_cache(tmp_path: Path, monkeypatch, lie: bool = False) -> tuple[str, str]:
    """A Hugging Face cache holding model ``org/tiny`` (its file a blob named by its sha256, or,
    with ``lie``, by the sha256 of another file of the same size); its snapshot folder (what
    ``from_pretrained("org/tiny")`` loads from) and the blob's name."""
    folder = Path(_saved(tmp_path, "llama"))
    data = (folder / "model.safetensors").read_bytes()
    if lie:  # the same size, one byte of lm_head different: the name no longer tells the truth
        (at,) = [start for n, start, _ in modelfiles.tensor_ranges(folder / "model.safetensors") if "lm_head" in n]
        data = data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]
    snapshot, sha = hub_cached(folder, tmp_path / "hub", data=data)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return str(snapshot), sha


def test_a_model_from_the_hub_cache_is_found_and_named_by_its_blob_once_verified(tmp_path, monkeypatch):
    snapshot, sha = _hub_cache(tmp_path, monkeypatch)
    assert session_modelfiles.folder_files("org/tiny") == [os.path.join(snapshot, "model.safetensors")]
    model = transformers.AutoModelForCausalLM.from_pretrained(snapshot).eval()
    model.name_or_path = "org/tiny"  # as loaded by its id (offline here): found through the cache
    assert session_modelfiles.loaded([model]) == {os.path.join(snapshot, "model.safetensors"): sha}
    url = str(tmp_path / "store")
    first = _take(url, "a", model=model)
    assert list(first.model_files) == [sha] and _referenced(first) >= _loaded_bytes(model)
    another_process()  # a second session: the store holds the index of the file the name claims
    second = _take(url, "b", model=transformers.AutoModelForCausalLM.from_pretrained(snapshot).eval())
    assert list(second.model_files) == [sha] and _referenced(second) >= _loaded_bytes(model)
    assert check(Store(url), second) == {}


@pytest.mark.parametrize("key", [None, ALICE], ids=["no key", "alice's key"])
def test_a_hub_cache_blob_whose_name_lies_is_not_taken_at_its_word(tmp_path, monkeypatch, key):
    """A second session's cache blob claims the first one's sha256 with other bytes. With a key the
    store's sealed index of the claimed file is used, and the tensor that differs is copied; without
    one no stored index is used: the file is indexed from its own bytes and named by its own sha256."""
    snapshot, sha = _hub_cache(tmp_path, monkeypatch)
    url = str(tmp_path / "store")
    _take(url, "a", key, model=transformers.AutoModelForCausalLM.from_pretrained(snapshot).eval())
    another_process()
    shutil.rmtree(tmp_path / "hub")
    snapshot, _ = _hub_cache(tmp_path, monkeypatch, lie=True)  # same name and size, other bytes
    model = transformers.AutoModelForCausalLM.from_pretrained(snapshot).eval()
    manifest = _take(url, "b", key, model=model)
    lied = signing.digest(model.lm_head.weight.detach().numpy().tobytes(), manifest.hash)
    if key:
        assert list(manifest.model_files) == [sha] and lied not in manifest.references  # copied
        assert _referenced(manifest) == _loaded_bytes(model) - model.lm_head.weight.nbytes
    else:
        actual = hashlib.sha256(Path(snapshot, "model.safetensors").read_bytes()).hexdigest()
        assert list(manifest.model_files) == [actual] != [sha] and lied in manifest.references
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    another_process()
    target: dict = {}
    config = PauseConfig(signing_key=key) if key else PauseConfig()
    cycle = jp.resume_and_verify(store=url, session="b", namespace=target, write_report=False, config=config)
    assert cycle.verdict.kind == "restored", cycle.verdict.details
    assert all(torch.equal(target["model"].state_dict()[k], v) for k, v in expected.items())


#: What a co-tenant plants under the public sha256 of the user's model file before the user's first
#: checkpoint: a garbage copy of its size (and an index record saying it is there); the genuine bytes
#: with an index of wrong digests; the co-tenant's own weights, of the same size, with their index.
PLANTS = ["garbage copy", "wrong digests", "their weights"]


def _plant(url: str, plant: str, mine: Path, theirs: Path) -> None:
    """Write ``plant`` into the user's store with the shared credential and no key of the user's."""
    store = Store(url)
    sha = hashlib.sha256(mine.read_bytes()).hexdigest()
    for algorithm in ("xxh3_128", "sha256"):  # whichever the user's checkpoints digest with
        index = modelfiles.index_file(str(mine), algorithm)
        data = mine.read_bytes()
        if plant == "garbage copy":
            data = bytes(len(data))
        elif plant == "wrong digests":
            wrong = [hashlib.sha256(t.name.encode()).hexdigest() for t in index.tensors]
            index.tensors = [
                modelfiles.Tensor(t.name, t.start, t.stop, d) for t, d in zip(index.tensors, wrong, strict=True)
            ]
        else:
            index = modelfiles.index_file(str(theirs), algorithm)
            index.file, data = sha, theirs.read_bytes()
        store.write(pool_key(sha), data)
        store.write(file_index_key(sha, algorithm), index.to_record(None))


def _sums(model: torch.nn.Module) -> dict[str, float]:
    return {k: float(v.double().sum()) for k, v in model.state_dict().items()}


@pytest.mark.parametrize("plant", PLANTS)
@pytest.mark.parametrize(
    ("via", "key"), [("folder", None), ("hub cache", None), ("hub cache", ALICE)], ids=["folder", "hub", "hub-keyed"]
)
def test_a_cotenants_plant_is_passed_over_and_the_user_loses_nothing(tmp_path, monkeypatch, plant, via, key):
    if via == "folder":
        folder = _saved(tmp_path, "llama")
        mine, local = Path(folder, "model.safetensors"), Path(folder)
    else:
        folder, _ = _hub_cache(tmp_path, monkeypatch)
        mine, local = Path(folder, "model.safetensors").resolve(), tmp_path / "hub"
    theirs = Path(_saved(tmp_path, "llama", seed=1), "model.safetensors")
    assert theirs.stat().st_size == mine.stat().st_size
    url = str(tmp_path / "store")
    _plant(url, plant, mine, theirs)

    model = _load(folder) if via == "folder" else transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    _take(url, "tune", key, model=model, step=1)
    second = _take(url, "tune", key, model=model, step=2)
    assert list(second.model_files) == [hashlib.sha256(mine.read_bytes()).hexdigest()]
    assert _referenced(second) >= _loaded_bytes(model)  # every loaded byte a reference into the pool
    shutil.rmtree(local)  # the pool alone gives the bytes

    another_process()
    target: dict = {}
    config = PauseConfig(signing_key=key) if key else PauseConfig()
    cycle = jp.resume_and_verify(store=url, session="tune", namespace=target, write_report=False, config=config)
    assert cycle.verdict.kind == "restored" and cycle.result.manifest.id == second.id, cycle.verdict.details
    assert target["step"] == 2 and _sums(target["model"]) == pytest.approx(_sums(model), abs=0)
    assert _sums(target["model"]) != pytest.approx(_sums(_load(str(theirs.parent))), abs=0)
