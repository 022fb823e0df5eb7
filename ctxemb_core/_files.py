"""What ctxemb trusts about a file on disk: one rule, for the weights and the ONNX export alike.

Hashing a 90 MB file costs a quarter of a second, so the sha256 of each file is cached, in memory
and in ``$CTXEMB_CACHE_DIR/digests.json``, under a key that names the *state* of the file::

    <resolved path>|<size>|<mtime_ns>|<ctime_ns>|<st_dev>|<st_ino>|<sha256 of the first and
                                                                      last 64 KiB>

and a file whose state has a cached digest is not read again. Why each part:

* ``mtime`` alone is not enough: ``os.utime`` (``touch -d``, ``cp -p``, ``rsync -t``, a tar
  extract) sets it back, so weights replaced by a same-size file with the old mtime would keep
  the old digest, and every cache keyed by that digest (the ONNX export) would serve the old
  network.
* ``ctime`` cannot be set back: any write, rename, ``chmod`` or ``utime`` sets it to now; a file
  replaced by another (``os.replace``) also has another inode. The key therefore changes on any
  change made through the file system, short of resetting the system clock.
* The head and tail hash guards against what the file system cannot see: a ``digests.json``
  copied to a machine whose files happen to share path, size, times and inode, or a write within
  one tick of the kernel's coarse clock. It reads 128 KiB, so a lookup stays sub-millisecond;
  a change only in the middle of a large file, made in the same clock tick as the digest, is
  the one case it leaves to the stat fields.

The trade: a file whose ctime or inode changes without its content changing (a ``chmod``, a
copy preserving times, a restore from backup) is hashed again once. That costs a fraction of a
second per file, where trusting less would serve another network under the old digest.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "DIGEST_CACHE",
    "adopt_digest",
    "cache_dir",
    "file_digests",
    "read_with_digest",
    "sha256_file",
    "write_atomic",
]

#: The name of the per-file digest cache under :func:`cache_dir`.
DIGEST_CACHE = "digests.json"
# Bytes hashed at each end of a file for its state key.
_EDGE = 64 * 1024
_CHUNK = 1 << 20

# state key -> sha256 hex digest of the whole file, for this process.
_MEMO: dict[str, str] = {}
_LOCK = threading.Lock()


def cache_dir() -> Path:
    """ctxemb's cache directory: ``$CTXEMB_CACHE_DIR``, else ``$XDG_CACHE_HOME/ctxemb``."""
    base = os.environ.get("CTXEMB_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ctxemb"
    )
    return Path(base)


def write_atomic(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` whole or not at all; whether it was written.

    A read-only cache directory only costs speed, so failing to write is not an error here.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return False
    return True


def _state(path: Path, st: os.stat_result, fh: BinaryIO | None = None) -> str:
    if fh is None:
        with path.open("rb") as own:
            return _state(path, st, own)
    edges = hashlib.sha256()
    fh.seek(0)
    edges.update(fh.read(_EDGE))
    if st.st_size > 2 * _EDGE:
        fh.seek(-_EDGE, os.SEEK_END)
    edges.update(fh.read(_EDGE))
    return (
        f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_dev}|"
        f"{st.st_ino}|{edges.hexdigest()[:32]}"
    )


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino, a.st_size, a.st_mtime_ns) == (
        b.st_dev,
        b.st_ino,
        b.st_size,
        b.st_mtime_ns,
    )


def sha256_file(path: Path) -> str:
    """The sha256 hex digest of a file's content, read now (nothing is cached)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _load_disk() -> dict[str, str]:
    try:
        disk = json.loads((cache_dir() / DIGEST_CACHE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # none yet, or damaged: only a slower start
    if not isinstance(disk, dict):
        return {}
    return {k: v for k, v in disk.items() if isinstance(k, str) and isinstance(v, str)}


def _remember(disk: dict[str, str], key: str, digest: str) -> None:
    # One entry per path: the state it had when last hashed (older states can never match).
    path = key.rsplit("|", 6)[0] + "|"
    for old in [k for k in disk if k.startswith(path)]:
        del disk[old]
    disk[key] = digest
    _MEMO[key] = digest


def file_digests(paths: Sequence[Path]) -> list[str]:
    """The sha256 hex digest of each file, hashed only when its state has no cached digest.

    Raises:
        OSError: a file cannot be read.
    """
    with _LOCK:
        disk: dict[str, str] | None = None
        changed = False
        digests = []
        for path in paths:
            before = path.stat()
            key = _state(path, before)
            digest = _MEMO.get(key)
            if digest is None:
                if disk is None:
                    disk = _load_disk()
                digest = disk.get(key)
                if digest is None:
                    digest = sha256_file(path)
                    # Remembered only if the file did not change while it was read.
                    if _same_file(before, path.stat()):
                        _remember(disk, key, digest)
                        changed = True
                else:
                    _MEMO[key] = digest
            digests.append(digest)
        if changed and disk is not None:
            write_atomic(cache_dir() / DIGEST_CACHE, json.dumps(disk))
    return digests


def read_with_digest(path: Path) -> tuple[bytes, str]:
    """The content of a file and the sha256 hex digest of exactly that content.

    Checking a file by its path and then loading it by its path leaves a window in which another
    process may replace it (``os.replace``: a new inode) between the two. Here the state key,
    the cached digest and the bytes all come from one open file, which keeps its inode whatever
    happens to the name; the file is hashed only when its state has no cached digest (then the
    bytes returned are the bytes hashed), and the state is read again after the content, so a
    write made meanwhile is seen.

    Raises:
        OSError: the file cannot be read.
    """
    with _LOCK, path.open("rb") as fh:
        before = os.fstat(fh.fileno())
        key = _state(path, before, fh)
        fh.seek(0)
        data = fh.read()
        after = os.fstat(fh.fileno())
        cached = _MEMO.get(key) or _load_disk().get(key)
        unchanged = (
            _same_file(before, after)
            and before.st_ctime_ns == after.st_ctime_ns
            and len(data) == before.st_size
        )
        if cached is not None and unchanged:
            _MEMO[key] = digest = cached
        else:
            # No digest for this state, or written while it was read: hash the bytes held.
            digest = hashlib.sha256(data).hexdigest()
    return data, digest


def adopt_digest(path: Path, digest: str, hashed: os.stat_result) -> None:
    """Remember ``digest`` for ``path``, a file hashed as ``hashed`` and since moved there.

    A rename keeps the inode and the content but may set the ctime, so the moved file would be
    hashed again on its first lookup; adopting it costs a stat instead. Nothing is remembered
    unless ``path`` is still the very file that was hashed (same device, inode, size, mtime).
    """
    with _LOCK, contextlib.suppress(OSError):  # not adopted: only hashed once more
        st = path.stat()
        if _same_file(st, hashed):
            disk = _load_disk()
            _remember(disk, _state(path, st), digest)
            write_atomic(cache_dir() / DIGEST_CACHE, json.dumps(disk))


def _umask() -> int:
    """The process's umask, read without changing it where the system tells it (Linux)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o077)  # elsewhere: set and restore at once (briefly process-wide)
    os.umask(mask)
    return mask


def replace_folder(work: Path, target: Path, what: str) -> None:
    """Move the finished folder ``work`` to ``target``, replacing what is there, atomically.

    A non-empty ``target`` is first moved aside (in the same parent folder), then ``work`` is
    renamed into place; if that rename fails, the previous folder is put back, and if even that
    fails it is kept where it was moved and the error says where: nothing is ever lost.
    ``what`` names the folder in errors ("export", "static model"). Callers check beforehand
    that ``target`` may be replaced.

    Raises:
        InvalidInputError: ``work`` cannot be moved to ``target``.
    """
    import shutil
    import tempfile

    from ctxemb_core.errors import InvalidInputError

    old: Path | None = None
    if target.is_dir():
        if any(target.iterdir()):
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.replaced-", dir=target.parent))
            os.replace(target, old / "previous")
        else:
            target.rmdir()
    try:
        # mkdtemp made ``work`` private (0700) while it was built; published, it gets the mode a
        # plain mkdir gives (0755 under umask 022), so other users can serve the folder.
        os.chmod(work, 0o777 & ~_umask())
        os.rename(work, target)
    except OSError as exc:
        why = f"the {what} cannot be moved to {target} ({exc})"
        if old is not None:  # put the previous folder back rather than leave nothing
            try:
                os.rename(old / "previous", target)
            except OSError:
                raise InvalidInputError(
                    f"{why}; the previous {what} is kept in {old / 'previous'}"
                ) from None
            shutil.rmtree(old, ignore_errors=True)
        raise InvalidInputError(why) from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
