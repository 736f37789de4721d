"""Per-user encryption: what a store holds is ciphertext that opens only with the user's key, in its place."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from jupyter_pause.store import encryption
from jupyter_pause.store.encryption import CHUNK, Cipher, DecryptionError, plain_size, sealed_size
from jupyter_pause.store.layout import pool_key
from jupyter_pause.store.signing import Keyring
from jupyter_pause.store.storage import Store
from tests.support.stores import stored_bytes

ALICE, FORMER, MALLORY = "alice's key 1f0c", "alice's former key 77aa", "mallory's key 0b3e"
SIZES = [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17]


@pytest.mark.parametrize("size", SIZES)
def test_what_is_sealed_opens_whole_and_by_range_and_as_a_stream(size):
    cipher, data, key = Cipher(Keyring(ALICE)), os.urandom(size), "sessions/s/status.json"
    sealed = cipher.seal(key, data)
    assert len(sealed) == sealed_size(size) and plain_size(len(sealed)) == size
    assert bytes(cipher.open(key, sealed)) == data
    streamed = b"".join(cipher.seal_stream(key, [data[i : i + 300_001] for i in range(0, size, 300_001)]))
    assert bytes(cipher.open(key, streamed)) == data
    in_parts = b"".join(bytes(part) for part in cipher.seal_pieces(key, data, chunks=2))
    assert len(in_parts) == sealed_size(size) and bytes(cipher.open(key, in_parts)) == data
    out = io.BytesIO()
    cipher.open_stream(key, io.BytesIO(streamed), out)
    assert out.getvalue() == data
    for start, stop in [(0, size), (size // 3, size // 2 + 1), (max(0, size - 5), size)]:
        if stop > start:
            ranged = cipher.read_range(key, lambda a, b: bytes(sealed[a:b]), start, stop)
            assert bytes(ranged) == data[start:stop]


def test_a_changed_truncated_or_moved_object_does_not_open():
    cipher, data = Cipher(Keyring(ALICE)), os.urandom(2 * CHUNK + 5)
    sealed = bytearray(cipher.seal("sessions/s/a.json", data))
    with pytest.raises(DecryptionError, match="copied from another key"):
        cipher.open("sessions/s/b.json", sealed)  # another place
    with pytest.raises(DecryptionError):
        cipher.open("sessions/s/a.json", sealed[: encryption.HEADER + CHUNK + encryption.TAG])  # whole chunks cut
    sealed[encryption.HEADER + CHUNK + 100] ^= 1
    with pytest.raises(DecryptionError, match="does not open with this user's key"):
        cipher.open("sessions/s/a.json", sealed)


def test_another_users_key_cannot_open_it_and_a_former_key_still_does():
    sealed = Cipher(Keyring(FORMER)).seal("sessions/s/a.json", b"alice's notebook")
    with pytest.raises(DecryptionError, match="encrypted with another key") as refused:
        Cipher(Keyring(MALLORY)).open("sessions/s/a.json", sealed)
    assert refused.value.why.startswith("encryption: encrypted with another key")
    assert bytes(Cipher(Keyring(ALICE, (FORMER,))).open("sessions/s/a.json", sealed)) == b"alice's notebook"


def test_the_same_bytes_seal_the_same_way_only_where_they_name_themselves():
    """A pool blob's ciphertext follows from its bytes and name (so one user's dedup survives);
    a record is sealed afresh each time (a nonce is never used twice with one key)."""
    cipher, blob = Cipher(Keyring(ALICE)), pool_key("ab" * 32)
    assert bytes(cipher.seal(blob, b"x" * 1000)) == bytes(cipher.seal(blob, b"x" * 1000))
    assert bytes(cipher.seal("sessions/s/status.json", b"x")) != bytes(cipher.seal("sessions/s/status.json", b"x"))
    assert bytes(Cipher(Keyring(MALLORY)).seal(blob, b"x" * 1000)) != bytes(cipher.seal(blob, b"x" * 1000))


def test_a_store_with_a_key_holds_only_ciphertext_and_reads_objects_written_before(tmp_path):
    """Everything a keyed store writes is sealed (sizes are the plaintext's to its callers); an
    object written before encryption was switched on is read as it is."""
    secret = b"the notebook's text: a marker 5d1f" * 1000
    plain = Store(str(tmp_path))
    plain.write("sessions/s/old.json", b'{"written": "before"}')
    store = Store(str(tmp_path), keys=ALICE)
    store.write("sessions/s/notebook", secret)
    store.write_many({"sessions/s/a": secret[:10], "sessions/s/b": secret[10:30]})
    assert store.create("sessions/s/lease.json", secret[:100]) and not store.create("sessions/s/lease.json", b"x")
    store.write_stream(pool_key("cd" * 32), iter([secret[:5000], secret[5000:]]), lambda: True)
    on_disk = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert b"marker 5d1f" not in on_disk
    assert bytes(store.read("sessions/s/notebook")) == secret
    assert bytes(store.read_range(pool_key("cd" * 32), 4990, 5010)) == secret[4990:5010]
    assert store.sizes(["sessions/s/notebook", "sessions/s/none"]) == {
        "sessions/s/notebook": len(secret),
        "sessions/s/none": None,
    }
    assert store.list("sessions/s/")["sessions/s/a"].size == 10
    assert bytes(store.read("sessions/s/old.json")) == b'{"written": "before"}'
    store.download(pool_key("cd" * 32), str(tmp_path / "copy"))
    assert (tmp_path / "copy").read_bytes() == secret
    with pytest.raises(DecryptionError):
        Store(str(tmp_path), keys=MALLORY).read("sessions/s/notebook")
    with pytest.raises(DecryptionError, match="is encrypted, and no key is set here: set JUPYTER_PAUSE_SIGNING_KEY"):
        plain.read("sessions/s/notebook")  # never taken for plaintext
    unsealing = Store(str(tmp_path), keys=ALICE, encrypt=False)  # encryption switched off: what it sealed still opens
    assert bytes(unsealing.read("sessions/s/notebook")) == secret and unsealing.mappable and not store.mappable


@pytest.mark.integration
def test_on_s3_ranged_parts_of_a_large_sealed_object_open_whole(s3_env):
    """A remote object larger than a part is read in ranged parts in parallel, then opened."""
    store, data = Store(s3_env, keys=ALICE), os.urandom(40 << 20)
    store.write(pool_key("ef" * 32), data)
    assert bytes(store.read(pool_key("ef" * 32), size=len(data))) == data
    assert (
        bytes(store.read_range(pool_key("ef" * 32), (17 << 20) + 3, (18 << 20) + 9))
        == data[(17 << 20) + 3 : (18 << 20) + 9]
    )
    raw = stored_bytes(s3_env, pool_key("ef" * 32))
    assert len(raw) == sealed_size(len(data)) and raw[-1000:] not in data


@pytest.mark.usefixtures("new_process")
def test_after_a_rotation_an_encrypted_checkpoint_resumes_with_the_former_key(tmp_path):
    """Its pool names and its ciphertext are the former key's: the new keyring finds and opens both."""
    import torch

    import jupyter_pause as jp
    from jupyter_pause.config import PauseConfig
    from tests.support.processes import another_process

    weights = torch.arange(300_000, dtype=torch.float32) * 0.731
    jp.checkpoint(store=str(tmp_path), session="s", namespace={"w": weights}, config=PauseConfig(signing_key=FORMER))
    another_process()
    target: dict = {}
    rotated = PauseConfig(signing_key=ALICE, verify_keys=[FORMER])
    result = jp.resume(store=str(tmp_path), session="s", namespace=target, config=rotated)
    assert torch.equal(target["w"], weights) and not result.damaged
    another_process()
    with pytest.raises(jp.PauseError, match="encrypted with another key"):
        jp.resume(store=str(tmp_path), session="s", namespace={}, config=PauseConfig(signing_key=ALICE))


LOADED = """\
import sys
from jupyter_pause.session import cycle
from jupyter_pause.server import extension
from jupyter_pause.store.signing import Keyring
from jupyter_pause.store.storage import Store
store = Store(sys.argv[1], keys=Keyring(sys.argv[2]) if sys.argv[2] else None, encrypt=bool(sys.argv[2]))
store.write("sessions/s/note.json", b"{}")
assert bytes(store.read("sessions/s/note.json")) == b"{}"
print("cryptography" in sys.modules)
"""


@pytest.mark.parametrize("key", ["", ALICE])
def test_cryptography_is_loaded_only_by_a_process_that_seals_or_opens(tmp_path, key):
    """Its bindings take a tenth of a second to load: every kernel a resume starts and every
    server would pay it for nothing without a key."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED, str(tmp_path / "store"), key], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == str(bool(key)), done.stderr
