"""A co-tenant on a shared S3 bucket cannot poison a user's model file: real kernels, per-user keys.

As on the README's Hub set-up: one bucket and one credential for the team, a ``{user}`` prefix
each, each user's signing key derived from the Hub's secret (``hub.keys.user_key``). Before alice's
first checkpoint, mallory, from her own kernel, writes into alice's prefix what alice's checkpoint
would find under the public sha256 of the model file alice loads from the Hugging Face cache: her
own weights (same size) with an index of their digests. alice checkpoints in her kernel and
resumes in a new kernel on a node without her cache: the resume is ``restored`` with alice's
weights, never mallory's.
"""

from __future__ import annotations

import shutil

import pytest

from jupyter_pause.hub.keys import user_key
from jupyter_pause.store.catalog import Catalog
from jupyter_pause.store.storage import Store
from tests.support.tensorfiles import hub_cached, tiny_llama

pytest.importorskip("transformers")

pytestmark = [pytest.mark.integration, pytest.mark.s3, pytest.mark.timeout(600)]

SECRET = "the team hub's secret, thirty-two characters or more 91a7"
SESSION = "train"

#: mallory's cell: her weights and their index, under the public name of alice's model file.
PLANT = """
from jupyter_pause.store import modelfiles
from jupyter_pause.store.layout import file_index_key, pool_key
from jupyter_pause.store.storage import Store
victim = Store({url!r})  # the team's credential; none of alice's keys
index = modelfiles.index_file({theirs!r}, "sha256")
index.file = {sha!r}  # the name alice's file has: the sha256 the Hugging Face cache names it by
victim.write(pool_key(index.file), open({theirs!r}, "rb").read())
victim.write(file_index_key(index.file, "sha256"), index.to_record(None))
"""

LOAD = """
%load_ext jupyter_pause
import transformers
model = transformers.AutoModelForCausalLM.from_pretrained({snapshot!r}).eval()
%checkpoint
"""

SUMS = "{k: float(v.double().sum()) for k, v in model.state_dict().items()}"


def _user(name: str, url: str, **env: str) -> dict[str, str]:
    """A user's kernel environment as their Hub server gives it: store, session, key."""
    return {
        "JUPYTER_PAUSE_STORE": url,
        "JUPYTER_PAUSE_SESSION": SESSION,
        "JUPYTER_PAUSE_SIGNING_KEY": user_key(SECRET, name),
        "JUPYTERHUB_USER": name,
        **env,
    }


def test_a_cotenants_weights_planted_under_the_public_name_are_never_loaded(start_kernel, tmp_path, s3_env):
    team, hub = s3_env, tmp_path / "hub"
    alice_url = f"{team}/alice"
    tiny_llama(tmp_path / "alice-model", seed=0)
    snapshot, sha = hub_cached(tmp_path / "alice-model", hub)
    theirs = tiny_llama(tmp_path / "mallory-model", seed=1)

    mallory = start_kernel(tmp_path, **_user("mallory", f"{team}/mallory"))
    weights = str(tmp_path / "mallory-model" / "model.safetensors")
    mallory.run(PLANT.format(url=alice_url, theirs=weights, sha=sha)).ok()
    mallory.close()

    work = tmp_path / "alice"
    work.mkdir()
    alice = start_kernel(work, **_user("alice", alice_url, HF_HUB_CACHE=str(hub)))
    said = alice.run(LOAD.format(snapshot=str(snapshot))).ok().stdout
    mine = alice.value(SUMS)
    alice.close()
    (checkpoint,) = Catalog(Store(alice_url, keys=user_key(SECRET, "alice"))).checkpoints(SESSION)
    assert list(checkpoint.model_files) == [sha] and checkpoint.references, said

    shutil.move(hub, tmp_path / "gone")  # another node: no Hugging Face cache, the pool gives the bytes
    again = start_kernel(work, **_user("alice", alice_url, HF_HUB_CACHE=str(hub)))
    out = again.run("%load_ext jupyter_pause\n%resume").ok().stdout
    assert "verdict: restored" in out and checkpoint.id in out, out
    resumed = again.value(SUMS)
    assert resumed == pytest.approx(mine, abs=0)
    assert resumed != pytest.approx(theirs, abs=0)
