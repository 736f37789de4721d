"""Every key of a store: how each is built from names, and how names are read back from keys.

A store is a folder or an object-store prefix (its URL is ``<root>``); every record lives under::

    <root>/blobs/<xx>/<digest>       the store's pool: content-addressed data shared by every
                                     checkpoint of every session (a manifest with ``pool`` set
                                     reads its blobs here), fanned out by <xx>, the digest's
                                     first two characters
    <root>/sessions/<session>/
        checkpoints/<id>.json        the manifest: the checkpoint exists once this exists
        pending/<id>.json            note of a checkpoint being written, naming the blobs it claims
        blobs/<xx>/<digest>          the session's own blobs, as checkpoints wrote them before the
                                     store had a pool (manifest format 1); they stay, and a newer
                                     checkpoint of the session may still name them
        reports/<id>--<when>.json    run report of one resume of checkpoint <id>, written at
                                     <when> = YYYYMMDD-HHMMSS-mmm (UTC, milliseconds)
        status.json                  the session's state (ready, paused, ...) as servers see it
        lease.json                   who is resuming the session, and until when, on a store
                                     without create-if-absent (and, mirrored, for servers that
                                     know only this key; see server/lease.py)
        lease/<epoch>.json           the same, where the store has create-if-absent: one record
                                     per taking of the lease, <epoch> counting up from 1
        lease/<epoch>.released       the holder of <epoch> gave the lease back
        journals/<journal>/<version>/     a work journal (journal/journal.py), one per processing version
            done/<xx>/<item>              one item's result and done mark, in one object
            failed/<xx>/<item>/<run>-<n>  the n-th failed attempt at an item during run <run>
            runs/<run>.json               one pass over the items: when, where, newest checkpoint
            runs/<run>.keys               the items that pass found pending, one <item> a line
    <root>/files/<xx>/<file>.<hash>.json   the index of a model file (``store.modelfiles``) whose
                                     bytes are the pool's blob <file> (its sha256): each tensor's
                                     name, byte range and <hash> digest; written once the file is
                                     whole in the pool, so it says the file is there
    <root>/releases/<id>.json        one release of a server: every session it paused, and whether
                                     the Hub stopped the server after
    <root>/probes/<hex>              written and removed at once by a server finding out whether the
                                     store refuses a second create of a key (storage.py)
    <root>/ledger/<day>/<when>-<tag>.json   one event of the GPU-hours ledger (ledger.py): a kernel
                                     or server started or stopped, a pause, a resume, busy spans;
                                     never rewritten, one object per event so writers never meet

``<session>`` is 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit; ``<id>``
is ``YYYYMMDD-HHMMSS-xxxxxx`` (UTC time and six hex digits, so ids sort by age), for checkpoints
and releases alike; ``<digest>`` is the lowercase hex digest of the blob's bytes, or, where the
user has a key, an HMAC of it under a key derived from theirs (``store.names``: no one else can
predict it), and so is ``<file>`` of a model file and its index. ``<journal>`` and
``<version>`` are named like sessions; ``<item>`` is 32 hex digits naming an item's key (its hash;
the key itself is inside the record) and ``<xx>`` its first two; ``<epoch>`` is 12 decimal digits
(zero-padded, so epochs sort as numbers); ``<hex>`` is 32 hex digits; ``<run>`` is
``YYYYMMDD-HHMMSS-ffffff-xxxx`` (UTC time to the microsecond and four hex digits). ``<day>`` is
``YYYYMMDD`` (UTC), ``<when>`` ``YYYYMMDD-HHMMSS-ffffff`` (the event's UTC time to the microsecond)
and ``<tag>`` eight hex digits, so two writers at the same microsecond still differ. Builders refuse
any other name with a ``PauseError``; parsers return None for a key that is not one of these, so a stray file in a
store is never taken for a record.

This layout is the format on disk: stores written by release 0.1.0 use it unchanged, and any
change here is a format change. A new kind of record gets its key here, beside these.
"""

from __future__ import annotations

import re
import secrets
import time

from ..errors import PauseError

# One key segment each: a session name, a checkpoint id, a blob digest.
_SESSION = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
_ID = r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6}"
_DIGEST = r"[0-9a-f]{32,128}"

#: Prefix of every session's records.
SESSIONS = "sessions/"
#: Prefix of the store's blob pool, shared by every session.
POOL = "blobs/"
#: Prefix of the indexes of model files held in the pool.
FILES = "files/"
#: Prefix of the records of server releases.
RELEASES = "releases/"
#: Prefix of the keys a server writes to find out what the store can do, removed at once.
PROBES = "probes/"
#: Prefix of the ledger's events, one folder per UTC day.
LEDGER = "ledger/"
#: Lease epochs run from 1 to this (12 digits in a key).
LAST_EPOCH = 10**12 - 1

_SESSION_KEY = re.compile(rf"{SESSIONS}({_SESSION})/.+")
_MANIFEST_KEY = re.compile(rf"{SESSIONS}{_SESSION}/checkpoints/({_ID})\.json")
_PENDING_KEY = re.compile(rf"{SESSIONS}{_SESSION}/pending/({_ID})\.json")
_BLOB_KEY = re.compile(rf"{SESSIONS}{_SESSION}/blobs/([0-9a-f]{{2}})/({_DIGEST})")
_POOL_KEY = re.compile(rf"{POOL}([0-9a-f]{{2}})/({_DIGEST})")
_FILE_KEY = re.compile(rf"{FILES}([0-9a-f]{{2}})/([0-9a-f]{{64}})\.(xxh3_128|sha256)\.json")
_ITEM = r"[0-9a-f]{32}"
_RUN = r"[0-9]{8}-[0-9]{6}-[0-9]{6}-[0-9a-f]{4}"
_JOURNAL = rf"{SESSIONS}{_SESSION}/journals/{_SESSION}/{_SESSION}"
_DONE_KEY = re.compile(rf"{_JOURNAL}/done/([0-9a-f]{{2}})/({_ITEM})")
_FAILED_KEY = re.compile(rf"{_JOURNAL}/failed/([0-9a-f]{{2}})/({_ITEM})/({_RUN})-([0-9]+)")
_RUN_KEY = re.compile(rf"{_JOURNAL}/runs/({_RUN})\.json")
_RELEASE_KEY = re.compile(rf"{RELEASES}({_ID})\.json")
_LEASE_EPOCH_KEY = re.compile(rf"{SESSIONS}{_SESSION}/lease/([0-9]{{12}})\.(json|released)")
_PROBE = r"[0-9a-f]{32}"
_LEDGER_KEY = re.compile(rf"{LEDGER}([0-9]{{8}})/(([0-9]{{8}})-[0-9]{{6}}-[0-9]{{6}}-[0-9a-f]{{8}})\.json")


def _valid(pattern: str, value: str, what: str, hint: str) -> str:
    """Return ``value`` if all of it matches ``pattern``, else raise naming the ``what`` and a ``hint``."""
    if isinstance(value, str) and re.fullmatch(pattern, value):
        return value
    shown = repr(value) if len(str(value)) <= 60 else repr(str(value)[:60]) + "..."
    raise PauseError(f"invalid {what} {shown}: {hint}")


def check_session(name: str) -> str:
    """Return ``name`` if it is a valid session name, else raise with what is allowed."""
    hint = "use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
    return _valid(_SESSION, name, "session name", hint)


def check_checkpoint_id(checkpoint_id: str) -> str:
    """Return ``checkpoint_id`` if it is a valid checkpoint id, else raise with what one looks like."""
    hint = "ids look like 20260101-120000-a1b2c3; see them with `jupyter pause list`"
    return _valid(_ID, checkpoint_id, "checkpoint id", hint)


def check_digest(digest: str) -> str:
    """Return ``digest`` if it can name a blob, else raise."""
    return _valid(_DIGEST, digest, "blob digest", "a blob is named by the lowercase hex digest of its bytes")


def new_checkpoint_id(now: float | None = None) -> str:
    """A new id that sorts by creation time: ``YYYYMMDD-HHMMSS-xxxxxx`` (UTC)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    return f"{stamp}-{secrets.token_hex(3)}"


def _session(session: str) -> str:
    """The folder of ``session``'s records, with its trailing slash."""
    return f"{SESSIONS}{check_session(session)}/"


def session_prefix(session: str) -> str:
    """Prefix of every record of ``session`` (``sessions/<session>/``)."""
    return _session(session)


def manifest_prefix(session: str) -> str:
    """Prefix of ``session``'s manifests."""
    return f"{_session(session)}checkpoints/"


def manifest_key(session: str, checkpoint_id: str) -> str:
    """Key of the manifest of checkpoint ``checkpoint_id``."""
    return f"{manifest_prefix(session)}{check_checkpoint_id(checkpoint_id)}.json"


def pending_prefix(session: str) -> str:
    """Prefix of ``session``'s notes of checkpoints being written."""
    return f"{_session(session)}pending/"


def pending_key(session: str, checkpoint_id: str) -> str:
    """Key of the note of checkpoint ``checkpoint_id`` while it is being written."""
    return f"{pending_prefix(session)}{check_checkpoint_id(checkpoint_id)}.json"


def blob_prefix(session: str) -> str:
    """Prefix of ``session``'s own blobs (written before the store had a pool)."""
    return f"{_session(session)}blobs/"


def blob_key(session: str, digest: str) -> str:
    """Key of ``session``'s own blob whose bytes have ``digest`` (written before the store had a pool)."""
    return f"{blob_prefix(session)}{check_digest(digest)[:2]}/{digest}"


def pool_prefix() -> str:
    """Prefix of the store's blob pool."""
    return POOL


def pool_key(digest: str) -> str:
    """Key of the pool's blob whose bytes have ``digest``."""
    return f"{POOL}{check_digest(digest)[:2]}/{digest}"


def blob_place(session: str, digest: str, pooled: bool) -> str:
    """Key of blob ``digest`` of a checkpoint of ``session``: in the pool, else in the session's folder."""
    return pool_key(digest) if pooled else blob_key(session, digest)


def file_index_prefix() -> str:
    """Prefix of the indexes of model files held in the pool."""
    return FILES


def file_index_key(sha256: str, algorithm: str) -> str:
    """Key of the index of the model file whose sha256 is ``sha256``, its tensors digested with ``algorithm``."""
    _valid(r"[0-9a-f]{64}", sha256, "model file digest", "a model file is named by the sha256 of its bytes")
    _valid(r"xxh3_128|sha256", algorithm, "digest algorithm", "use xxh3_128 or sha256")
    return f"{FILES}{sha256[:2]}/{sha256}.{algorithm}.json"


def file_index_of(key: str) -> str | None:
    """The model file (its sha256) of an index key, or None when ``key`` is not one."""
    found = _FILE_KEY.fullmatch(key)
    if found is None or found.group(2)[:2] != found.group(1):
        return None
    return found.group(2)


def report_prefix(session: str) -> str:
    """Prefix of ``session``'s run reports."""
    return f"{_session(session)}reports/"


def report_key(session: str, checkpoint_id: str, when: float) -> str:
    """Key of the run report of a resume of ``checkpoint_id`` written at ``when`` (epoch seconds)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(when))
    millis = int(when * 1000) % 1000
    return f"{report_prefix(session)}{check_checkpoint_id(checkpoint_id)}--{stamp}-{millis:03d}.json"


def status_key(session: str) -> str:
    """Key of ``session``'s state as every server sharing the store sees it."""
    return f"{_session(session)}status.json"


def lease_key(session: str) -> str:
    """Key of the lease held by whoever is resuming ``session`` (settle protocol, and its mirror)."""
    return f"{_session(session)}lease.json"


def lease_prefix(session: str) -> str:
    """Prefix of ``session``'s lease epochs (create-if-absent protocol)."""
    return f"{_session(session)}lease/"


def _epoch(epoch: int) -> str:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 1 <= epoch <= LAST_EPOCH:
        raise PauseError(f"invalid lease epoch {epoch!r}: epochs are whole numbers from 1 to {LAST_EPOCH}")
    return f"{epoch:012d}"


def lease_epoch_key(session: str, epoch: int) -> str:
    """Key of the record of the ``epoch``-th taking of ``session``'s lease."""
    return f"{lease_prefix(session)}{_epoch(epoch)}.json"


def lease_released_key(session: str, epoch: int) -> str:
    """Key of the mark that the holder of lease ``epoch`` gave it back."""
    return f"{lease_prefix(session)}{_epoch(epoch)}.released"


def lease_epoch(key: str) -> tuple[int, bool] | None:
    """``(epoch, released)`` of a lease record's key (False) or release mark's key (True), else None."""
    found = _LEASE_EPOCH_KEY.fullmatch(key)
    if found is None or int(found.group(1)) == 0:
        return None
    return int(found.group(1)), found.group(2) == "released"


def probe_key(token: str) -> str:
    """Key of one probe of what the store can do; ``token`` is 32 hex digits (``secrets.token_hex(16)``)."""
    return f"{PROBES}{_valid(_PROBE, token, 'probe token', 'a probe is named by 32 hex digits')}"


def release_key(release_id: str) -> str:
    """Key of the record of release ``release_id`` (ids are made by ``new_checkpoint_id``)."""
    hint = "release ids look like 20260101-120000-a1b2c3"
    return f"{RELEASES}{_valid(_ID, release_id, 'release id', hint)}.json"


def release_of(key: str) -> str | None:
    """The release id of a release record's key, else None."""
    match = _RELEASE_KEY.fullmatch(key)
    return match.group(1) if match else None


def ledger_prefix(day: float | None = None) -> str:
    """Prefix of every ledger event, or with ``day`` (any epoch time in it) of that UTC day's events."""
    if day is None:
        return LEDGER
    return f"{LEDGER}{time.strftime('%Y%m%d', time.gmtime(day))}/"


def ledger_key(at: float, tag: str | None = None) -> str:
    """Key of a ledger event that happened at ``at`` (epoch seconds); ``tag``: 8 hex digits, random if absent."""
    tag = _valid(r"[0-9a-f]{8}", tag if tag is not None else secrets.token_hex(4), "ledger tag", "use 8 hex digits")
    seconds, micros = divmod(int(round(at * 1_000_000)), 1_000_000)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(seconds))
    return f"{ledger_prefix(seconds)}{stamp}-{micros:06d}-{tag}.json"


def ledger_of(key: str) -> str | None:
    """The name of a ledger event's key (``<when>-<tag>``), or None when ``key`` is not one (or sits
    in another day's folder)."""
    found = _LEDGER_KEY.fullmatch(key)
    if found is None or found.group(1) != found.group(3):
        return None
    return found.group(2)


def check_journal(name: str, what: str = "journal name") -> str:
    """Return ``name`` if it can name a journal (or, with ``what``, a journal's version), else raise."""
    hint = "use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit (no '/')"
    return _valid(_SESSION, name, what, hint)


def new_run_id(now: float | None = None) -> str:
    """A new journal run id that sorts by start time: ``YYYYMMDD-HHMMSS-ffffff-xxxx`` (UTC)."""
    now = now if now is not None else time.time()
    micros = int(now * 1_000_000) % 1_000_000
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime(now))}-{micros:06d}-{secrets.token_hex(2)}"


def journal_versions_prefix(session: str, journal: str) -> str:
    """Prefix of every version of a journal: the next key segment is the version."""
    return f"{_session(session)}journals/{check_journal(journal)}/"


def journal_prefix(session: str, journal: str, version: str) -> str:
    """Prefix of every record of one version of a journal."""
    return f"{journal_versions_prefix(session, journal)}{check_journal(version, 'journal version')}/"


def journal_done_prefix(session: str, journal: str, version: str) -> str:
    """Prefix of a journal's done records."""
    return f"{journal_prefix(session, journal, version)}done/"


def journal_done_key(session: str, journal: str, version: str, item: str) -> str:
    """Key of the record that holds item ``item``'s result and done mark."""
    item = _valid(_ITEM, item, "journal item", "an item is named by 32 hex digits of its key's hash")
    return f"{journal_done_prefix(session, journal, version)}{item[:2]}/{item}"


def journal_failed_prefix(session: str, journal: str, version: str) -> str:
    """Prefix of a journal's records of failed attempts."""
    return f"{journal_prefix(session, journal, version)}failed/"


def journal_failed_key(session: str, journal: str, version: str, item: str, run: str, n: int) -> str:
    """Key of the ``n``-th failed attempt at ``item`` during run ``run``."""
    item = _valid(_ITEM, item, "journal item", "an item is named by 32 hex digits of its key's hash")
    run = _valid(_RUN, run, "journal run id", "run ids look like 20260101-120000-123456-a1b2")
    return f"{journal_failed_prefix(session, journal, version)}{item[:2]}/{item}/{run}-{int(n)}"


def journal_run_prefix(session: str, journal: str, version: str) -> str:
    """Prefix of a journal's run records."""
    return f"{journal_prefix(session, journal, version)}runs/"


def journal_run_key(session: str, journal: str, version: str, run: str, suffix: str = "json") -> str:
    """Key of run ``run``'s record (``json``) or of the items it found pending (``keys``)."""
    run = _valid(_RUN, run, "journal run id", "run ids look like 20260101-120000-123456-a1b2")
    if suffix not in ("json", "keys"):
        raise PauseError(f"invalid journal run record {suffix!r}: use 'json' or 'keys'")
    return f"{journal_run_prefix(session, journal, version)}{run}.{suffix}"


def journal_done_item(key: str) -> str | None:
    """The item of a done-record key, or None when ``key`` is not one."""
    found = _DONE_KEY.fullmatch(key)
    if found is None or found.group(2)[:2] != found.group(1):
        return None
    return found.group(2)


def journal_failed_item(key: str) -> tuple[str, str, int] | None:
    """``(item, run, n)`` of a failed-attempt key, or None when ``key`` is not one."""
    found = _FAILED_KEY.fullmatch(key)
    if found is None or found.group(2)[:2] != found.group(1):
        return None
    return found.group(2), found.group(3), int(found.group(4))


def journal_run(key: str) -> str | None:
    """The run id of a run-record key (``runs/<run>.json``), or None when ``key`` is not one."""
    found = _RUN_KEY.fullmatch(key)
    return found.group(1) if found else None


def session_of(key: str) -> str | None:
    """The session a key belongs to, or None when the key is not under a valid session."""
    found = _SESSION_KEY.fullmatch(key)
    return found.group(1) if found else None


def manifest_id(key: str) -> str | None:
    """The checkpoint id of a manifest key, or None when ``key`` is not one."""
    found = _MANIFEST_KEY.fullmatch(key)
    return found.group(1) if found else None


def pending_id(key: str) -> str | None:
    """The checkpoint id of a pending-note key, or None when ``key`` is not one."""
    found = _PENDING_KEY.fullmatch(key)
    return found.group(1) if found else None


def blob_digest(key: str) -> str | None:
    """The digest of a session's blob key, or None when ``key`` is not one (or sits in the wrong fan-out folder)."""
    found = _BLOB_KEY.fullmatch(key)
    if found is None or found.group(2)[:2] != found.group(1):
        return None
    return found.group(2)


def pool_digest(key: str) -> str | None:
    """The digest of a pool blob's key, or None when ``key`` is not one (or sits in the wrong fan-out folder)."""
    found = _POOL_KEY.fullmatch(key)
    if found is None or found.group(2)[:2] != found.group(1):
        return None
    return found.group(2)


def any_blob_digest(key: str) -> str | None:
    """The digest of a blob's key, in the pool or a session's folder; None for any other key."""
    return pool_digest(key) or blob_digest(key)
