"""Local-filesystem object store (a plain path or ``file://``): the embedded default.

Owns the mapping of the storage contract onto POSIX files, safe across
threads *and* processes sharing one directory:

* **Atomic puts.**  Every write goes to a fresh temp file in
  ``<root>/.caslake-tmp/``, is fsynced and given a unique mtime, then renamed
  into place; the parent directory is fsynced afterwards.
* **Create** uses ``os.link(tmp, dst)``, which fails with EEXIST when ``dst``
  exists -- atomic across processes, no lock needed.
* **Overwrite, compare-and-swap and delete** take an exclusive ``flock`` on a
  per-key lock file ``<root>/.caslake-locks/<sha1 of key>``, so that the ETag
  comparison and the ``os.replace``/``unlink`` happen as one step.  Lock
  files are removed only by ``collect_stale_locks`` (gc), under the same flock,
  and a locker re-checks after acquiring that the path still names its file.
* **ETags** are ``"<inode>-<mtime_ns>-<size>"`` (hex) from ``os.stat``.  Each
  write creates a new inode and stamps it with a nanosecond mtime strictly
  later than the file it replaces, so every write changes the ETag even when
  the filesystem reuses inode numbers or has a coarse clock.
* **Reads** open the file once and ``fstat`` that descriptor, so the data and
  the ETag always describe the same version (files are never modified in
  place, only replaced).

The hidden ``.caslake-*`` directories are skipped by ``list``.  Temp files
left by a crashed writer hold its rows: ``list_staged``/``delete_staged`` let gc
collect them by its age-and-fence rule (a live writer's file is young: every
write moves its mtime).
Unlike S3, a key cannot be both an object and a prefix of other keys (``a``
and ``a/b``): writing the second raises StoreError.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote

from caslake.errors import (
    AlreadyExists,
    NotFound,
    PreconditionFailed,
    PutOutcomeUnknown,
    StoreConfigError,
    StoreError,
    TransientStoreError,
)
from caslake.store.base import (
    COMPOSE,
    DELETE,
    GET,
    GET_RANGE,
    HEAD,
    LIST,
    PUT,
    ComposePart,
    CopyFrom,
    GetResult,
    IfMatch,
    Mode,
    ObjectMeta,
    ObjectStore,
    PutMode,
    StagedFile,
    StoreCounters,
    check_compose_parts,
    normalize_etag,
)
from caslake.store.keys import RESERVED_PREFIX, check_key, check_prefix
from caslake.store.ranges import DEFAULT_MAX_REQUEST, LOCAL_MAX_GAP, plan_ranges, slice_results
from caslake.store.retry import DEFAULT_RETRY, Retrier, RetryPolicy, same_bytes

TMP_DIR = RESERVED_PREFIX + "tmp"
LOCK_DIR = RESERVED_PREFIX + "locks"

_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _still_linked(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (lock files are unlinked
    by :meth:`LocalStore.collect_stale_locks`)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_ino, st.st_dev) == (mine.st_ino, mine.st_dev)


def etag_from_stat(st: os.stat_result) -> str:
    """The canonical (quoted) ETag of a file version."""
    return f'"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"'


def path_from_uri(uri: str) -> Path:
    """The root directory named by a plain path or a ``file:`` URI.  A URI is
    percent-decoded (RFC 8089, as ``Path.as_uri()`` and ``Table.uri`` encode it);
    Spark's ``file:/abs/path`` form is accepted too."""
    raw = uri
    if uri.startswith("file:"):
        raw = uri[len("file:"):]
        if raw.startswith("//"):
            raw = raw[2:]
            if raw.startswith("localhost/"):
                raw = raw[len("localhost"):]
        raw = unquote(raw)
        if not raw.startswith("/"):
            raise StoreConfigError(
                f"file URI {uri!r} must be absolute (file:///abs/path)", key=None
            )
    if not raw:
        raise StoreConfigError(f"empty local path in store URI {uri!r}")
    return Path(raw).expanduser().absolute()


_REASONS = {errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
            errno.EPERM: "operation not permitted", errno.ENOSPC: "no space left on the device",
            errno.EDQUOT: "the disk quota is exceeded"}
NOT_WRITTEN = "nothing was written"


def _os_error(exc: OSError, what: str, key: str | None, outcome: str | None = None
              ) -> StoreError:
    """Map an unexpected OSError to the caslake error tree: a permission or read-only
    file system is a StoreConfigError (the location is unusable as given), a busy or
    interrupted call a TransientStoreError, anything else (a full disk) a StoreError.
    ``outcome`` says what became of the request (e.g. "nothing was written")."""
    reason = _REASONS.get(exc.errno or 0) or exc.strerror or str(exc)
    where = f" ({exc.filename})" if exc.filename else ""
    message = f"{what}: {reason}{where}" + (f"; {outcome}" if outcome else "")
    if exc.errno in (errno.EAGAIN, errno.EINTR, errno.EBUSY, errno.ETIMEDOUT):
        return TransientStoreError(message, key=key)
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return StoreConfigError(message, key=key)
    return StoreError(message, key=key)


class LocalStore(ObjectStore):
    """Objects as files under a root directory; see the module docstring."""

    def __init__(self, uri: str | os.PathLike[str], *, fsync: bool = True,
                 max_gap: int = LOCAL_MAX_GAP, max_request: int = DEFAULT_MAX_REQUEST,
                 retry_policy: RetryPolicy = DEFAULT_RETRY) -> None:
        self.root = path_from_uri(os.fspath(uri))
        self.uri = self.root.as_uri()
        self.counters = StoreCounters()
        self.fsync = fsync
        self.max_gap = max_gap
        self.max_request = max_request
        self.retrier = Retrier(retry_policy)
        if self.root.exists() and not self.root.is_dir():
            raise StoreConfigError(f"store root {str(self.root)!r} is not a directory")

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    # --- paths ------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def _lock_path(self, key: str) -> Path:
        digest = hashlib.sha1(key.encode("utf-8")).hexdigest()
        return self.root / LOCK_DIR / digest

    @contextlib.contextmanager
    def _key_lock(self, key: str) -> Iterator[None]:
        lock_path = self._lock_path(key)
        while True:
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if _still_linked(fd, lock_path):
                    break
            except BaseException:
                os.close(fd)
                raise
            # The collector unlinked this file while we waited: a locker that
            # opens the path now gets a new file, so our lock excludes no one.
            os.close(fd)
        try:
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def collect_stale_locks(self) -> int:
        """Unlink every lock file nobody holds; return how many.

        Safe against concurrent lockers: a file is unlinked only while this
        process holds its exclusive flock (taken without blocking, so a held
        file is skipped), and every locker checks after acquiring that the path
        still names the inode it locked, and starts over otherwise."""
        lock_dir = self.root / LOCK_DIR
        try:
            names = os.listdir(lock_dir)
        except FileNotFoundError:
            return 0
        removed = 0
        for name in names:
            path = lock_dir / name
            try:
                fd = os.open(path, os.O_RDWR | _CLOEXEC)
            except (FileNotFoundError, IsADirectoryError):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _still_linked(fd, path):
                    os.unlink(path)
                    removed += 1
            except BlockingIOError:
                continue  # in use by a compare-and-swap or delete right now
            except FileNotFoundError:
                continue
            finally:
                os.close(fd)
        return removed

    def _fsync_dir(self, directory: Path) -> None:
        """Make a rename or link in ``directory`` durable.  It runs after the change:
        a failure here is a PutOutcomeUnknown (the change was made, but may not
        survive a crash), never "nothing was written"."""
        if not self.fsync:
            return
        try:
            fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            except OSError as exc:  # some filesystems refuse fsync on directories
                if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
                    raise
            finally:
                os.close(fd)
        except OSError as exc:
            error = _os_error(exc, f"cannot sync {str(directory)!r} in {self.uri}", None,
                              "the change was made but may not survive a crash")
            raise PutOutcomeUnknown(str(error)) from exc

    def _write_temp(self, data: bytes, *, not_before_ns: int = 0) -> tuple[Path, str]:
        """Write ``data`` to a new temp file; return its path and its ETag.

        The mtime is set to a fresh nanosecond timestamp (and later than
        ``not_before_ns``) so that the ETag is unique even if the inode number
        is later reused.
        """
        tmp_dir = self.root / TMP_DIR
        tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp = tmp_dir / f"{uuid.uuid4().hex}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            stamp = max(time.time_ns(), not_before_ns + 1)
            os.utime(fd, ns=(stamp, stamp))
            if self.fsync:
                os.fsync(fd)
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        os.close(fd)
        return tmp, etag_from_stat(st)

    # --- reads ------------------------------------------------------------------

    def get(self, key: str) -> GetResult:
        path = self._path(key)
        try:
            fd = os.open(path, _READ_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            self.counters.record(GET)
            raise NotFound(f"no object {key!r} in {self.uri}", key=key) from None
        except IsADirectoryError:
            self.counters.record(GET)
            raise NotFound(f"{key!r} is a directory, not an object, in {self.uri}",
                           key=key) from None
        except OSError as exc:
            self.counters.record(GET)
            raise _os_error(exc, f"cannot open {key!r}", key) from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self.counters.record(GET)
                raise NotFound(f"{key!r} is not a regular file in {self.uri}", key=key)
            chunks = []
            remaining = st.st_size
            offset = 0
            while remaining > 0:
                chunk = os.pread(fd, remaining, offset)
                if not chunk:
                    break
                chunks.append(chunk)
                offset += len(chunk)
                remaining -= len(chunk)
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        except OSError as exc:
            self.counters.record(GET)
            raise _os_error(exc, f"cannot read {key!r}", key) from exc
        finally:
            os.close(fd)
        self.counters.record(GET, bytes_in=len(data))
        return GetResult(data, etag_from_stat(st))

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]], *,
                   etag: str | None = None) -> list[bytes]:
        path = self._path(key)
        requests = plan_ranges(ranges, max_gap=self.max_gap, max_request=self.max_request)
        if not requests:
            return [b""] * len(ranges)
        try:
            fd = os.open(path, _READ_FLAGS)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            self.counters.record(GET_RANGE)
            raise NotFound(f"no object {key!r} in {self.uri}", key=key) from None
        except OSError as exc:
            self.counters.record(GET_RANGE)
            raise _os_error(exc, f"cannot open {key!r}", key) from exc
        try:
            st = os.fstat(fd)
            current = etag_from_stat(st)
            if etag is not None and normalize_etag(etag) != current:
                self.counters.record(GET_RANGE)
                raise PreconditionFailed(
                    f"object {key!r} changed: ETag is {current}, expected {normalize_etag(etag)}",
                    key=key,
                )
            payloads = []
            for req in requests:
                payload = os.pread(fd, req.length, req.start)
                # pread may return short only at end of file for regular files.
                while len(payload) < req.length:
                    more = os.pread(fd, req.length - len(payload), req.start + len(payload))
                    if not more:
                        break
                    payload += more
                self.counters.record(GET_RANGE, bytes_in=len(payload))
                payloads.append(payload)
        except OSError as exc:
            raise _os_error(exc, f"cannot read {key!r}", key) from exc
        finally:
            os.close(fd)
        return slice_results(ranges, requests, payloads, key=key)

    def head(self, key: str) -> ObjectMeta:
        path = self._path(key)
        self.counters.record(HEAD)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"no object {key!r} in {self.uri}", key=key) from None
        except OSError as exc:
            raise _os_error(exc, f"cannot stat {key!r}", key) from exc
        if not stat.S_ISREG(st.st_mode):
            raise NotFound(f"{key!r} is not a regular file in {self.uri}", key=key)
        return self._meta(key, st)

    @staticmethod
    def _meta(key: str, st: os.stat_result) -> ObjectMeta:
        return ObjectMeta(key, st.st_size, etag_from_stat(st),
                          datetime.fromtimestamp(st.st_mtime_ns / 1e9, tz=UTC))

    def list(self, prefix: str = "") -> Iterator[ObjectMeta]:
        check_prefix(prefix)
        self.counters.record(LIST)
        # Start the walk at the deepest directory the prefix names.
        base = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        found: list[ObjectMeta] = []
        self._walk(self.root.joinpath(*base.split("/")) if base else self.root,
                   base, prefix, found)
        found.sort(key=lambda m: m.key)
        return iter(found)

    def _walk(self, directory: Path, rel: str, prefix: str,
              found: builtins.list[ObjectMeta]) -> None:
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise _os_error(exc, f"cannot list {rel or '/'!r}", rel or None) from exc
        for entry in entries:
            name = entry.name
            if not rel and name.startswith(RESERVED_PREFIX):
                continue  # bookkeeping directories are not objects
            key = f"{rel}/{name}" if rel else name
            try:
                if entry.is_dir(follow_symlinks=False):
                    # Descend only if something under it can match the prefix.
                    sub = key + "/"
                    if sub.startswith(prefix) or prefix.startswith(sub):
                        self._walk(Path(entry.path), key, prefix, found)
                    continue
                if not key.startswith(prefix):
                    continue
                st = entry.stat()
            except FileNotFoundError:
                continue  # removed while we walked
            if stat.S_ISREG(st.st_mode):
                found.append(self._meta(key, st))

    # --- writes -----------------------------------------------------------------

    def put(self, key: str, data: bytes, *, mode: Mode = PutMode.OVERWRITE) -> str:
        """One logical put, retried on transient errors (EAGAIN, EBUSY, ETIMEDOUT on a
        network filesystem) by the rules of :mod:`caslake.store.retry`."""
        path = self._path(key)
        if not (mode is PutMode.CREATE or mode is PutMode.OVERWRITE or isinstance(mode, IfMatch)):
            raise TypeError(f"unknown put mode {mode!r}")
        return self.retrier.put(key, mode, lambda: self._put_once(key, path, data, mode),
                                lambda: same_bytes(self, key, data))

    def _put_once(self, key: str, path: Path, data: bytes, mode: Mode) -> str:
        self.counters.record(PUT, bytes_out=len(data))
        with self._write_errors(key):
            path.parent.mkdir(parents=True, exist_ok=True)
            if mode is PutMode.CREATE:
                return self._create(key, path, data)
            return self._replace(key, path, data, mode)

    @contextlib.contextmanager
    def _write_errors(self, key: str) -> Iterator[None]:
        """Map the OSErrors of writing ``key`` to the caslake error tree."""
        try:
            yield
        except (NotADirectoryError, FileExistsError) as exc:
            raise StoreError(f"cannot write {key!r}: a parent path is a file ({exc}); "
                             f"{NOT_WRITTEN}", key=key) from exc
        except OSError as exc:
            raise _os_error(exc, f"cannot write {key!r} in {self.uri}", key,
                            NOT_WRITTEN) from exc

    def local_path(self, key: str, *, etag: str | None = None) -> str | None:
        path = self._path(key)
        if etag is not None:
            try:
                st = os.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                raise NotFound(f"no object {key!r} in {self.uri}", key=key) from None
            if etag_from_stat(st) != normalize_etag(etag):
                raise PreconditionFailed(f"object {key!r} changed: ETag is "
                                         f"{etag_from_stat(st)}, expected "
                                         f"{normalize_etag(etag)}", key=key)
        return str(path)

    def list_staged(self) -> builtins.list[StagedFile]:
        """Every regular file of ``.caslake-tmp/`` (see :meth:`ObjectStore.list_staged`)."""
        self.counters.record(LIST)
        try:
            entries = list(os.scandir(self.root / TMP_DIR))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise _os_error(exc, f"cannot list {TMP_DIR!r}", None) from exc
        out = []
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # published or discarded while we listed
            if stat.S_ISREG(st.st_mode):
                out.append(StagedFile(f"{TMP_DIR}/{entry.name}", st.st_size,
                                      datetime.fromtimestamp(st.st_mtime_ns / 1e9, tz=UTC)))
        return sorted(out, key=lambda s: s.name)

    def delete_staged(self, staged: StagedFile, *, not_after: datetime | None = None
                      ) -> bool:
        head, _, name = staged.name.partition("/")
        if head != TMP_DIR or not name or "/" in name or name in (".", ".."):
            raise StoreError(f"{staged.name!r} is not a staging file of {self.uri}",
                             key=None)
        path = self.root / TMP_DIR / name
        self.counters.record(DELETE)
        try:
            st = os.stat(path, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                return False
            # Whole milliseconds, as gc's fence counts them.
            if (not_after is not None and
                    st.st_mtime_ns // 1_000_000 > round(not_after.timestamp() * 1000)):
                return False  # written to since it was listed: a writer is alive
            os.unlink(path)
        except FileNotFoundError:
            return False  # published or discarded meanwhile
        except OSError as exc:
            raise _os_error(exc, f"cannot delete staging file {staged.name!r}", None) from exc
        return True

    def staging_dir(self) -> str:
        """The directory for staged files, checked to take a new file: a read-only or
        unwritable store fails here, typed, before any work."""
        tmp_dir = self.root / TMP_DIR
        probe = tmp_dir / f"{uuid.uuid4().hex}.probe"
        try:
            tmp_dir.mkdir(parents=True, exist_ok=True)
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o644))
            os.unlink(probe)
        except OSError as exc:
            raise _os_error(exc, f"cannot stage files in {self.uri}", None,
                            NOT_WRITTEN) from exc
        return str(tmp_dir)

    def put_file(self, key: str, path: str, *, mode: Mode) -> str:
        """Create-only puts of a file built in :meth:`staging_dir` are a link: no copy."""
        src = Path(path)
        if mode is not PutMode.CREATE or src.parent != self.root / TMP_DIR:
            return super().put_file(key, path, mode=mode)
        return self._link_staged(key, src, PUT, uploaded=None)

    def _link_staged(self, key: str, src: Path, kind: str, *, uploaded: int | None,
                     copied: int = 0) -> str:
        """Publish the staged file ``src`` at ``key`` create-only (a hard link), counting
        one ``kind`` request with ``uploaded`` bytes out (None: the file's size)."""
        dst = self._path(key)
        try:
            fd = os.open(src, os.O_RDONLY)
        except FileNotFoundError:
            raise StoreError(f"cannot write {key!r}: its staged file {src.name!r} is gone "
                             f"from {self.uri} (gc collects staging files older than its "
                             "retention: the write outlived it)", key=key) from None
        try:
            stamp = time.time_ns()
            os.utime(fd, ns=(stamp, stamp))
            if self.fsync:
                os.fsync(fd)
            st = os.fstat(fd)
        except OSError as exc:
            raise _os_error(exc, f"cannot write {key!r} in {self.uri}", key,
                            NOT_WRITTEN) from exc
        finally:
            os.close(fd)
        self.counters.record(kind, bytes_out=st.st_size if uploaded is None else uploaded,
                             bytes_copied=copied)
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src, dst)
            except FileExistsError:
                raise AlreadyExists(f"object {key!r} already exists in {self.uri}",
                                    key=key) from None
        except OSError as exc:
            raise _os_error(exc, f"cannot write {key!r} in {self.uri}", key,
                            NOT_WRITTEN) from exc
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(src)
        self._fsync_dir(dst.parent)
        return etag_from_stat(st)

    def _create(self, key: str, path: Path, data: bytes) -> str:
        tmp, new_etag = self._write_temp(data)
        try:
            try:
                os.link(tmp, path)
            except FileExistsError:
                if path.is_dir():
                    raise StoreError(f"cannot create {key!r}: it is a directory of other keys",
                                     key=key) from None
                raise AlreadyExists(f"object {key!r} already exists in {self.uri}",
                                    key=key) from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self._fsync_dir(path.parent)
        return new_etag

    def _replace(self, key: str, path: Path, data: bytes, mode: Mode) -> str:
        with self._key_lock(key):
            try:
                current: os.stat_result | None = os.stat(path)
            except FileNotFoundError:
                current = None
            if isinstance(mode, IfMatch):
                if current is None:
                    raise NotFound(f"no object {key!r} to compare-and-swap in {self.uri}",
                                   key=key)
                if etag_from_stat(current) != normalize_etag(mode.etag):
                    raise PreconditionFailed(
                        f"object {key!r} changed: ETag is {etag_from_stat(current)}, "
                        f"expected {normalize_etag(mode.etag)}",
                        key=key,
                    )
            if current is not None and stat.S_ISDIR(current.st_mode):
                raise StoreError(f"cannot write {key!r}: it is a directory", key=key)
            tmp, new_etag = self._write_temp(
                data, not_before_ns=current.st_mtime_ns if current is not None else 0
            )
            try:
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        self._fsync_dir(path.parent)
        return new_etag

    def delete(self, key: str) -> None:
        path = self._path(key)
        self.counters.record(DELETE)
        if not os.path.lexists(path):
            return  # nothing to delete; also avoids creating bookkeeping dirs
        try:
            with self._key_lock(key):
                os.unlink(path)
        except (FileNotFoundError, NotADirectoryError):
            return
        except IsADirectoryError as exc:
            raise StoreError(f"cannot delete {key!r}: it is a directory", key=key) from exc
        except OSError as exc:
            raise _os_error(exc, f"cannot delete {key!r} in {self.uri}", key,
                            "the object was not deleted") from exc
        self._fsync_dir(path.parent)

    # --- compose ------------------------------------------------------------------

    _COPY_CHUNK = 8 * 1024 * 1024

    def compose(self, dest: str, parts: Sequence[ComposePart]) -> str:
        """Copies ranges file to file into a staged file, then links it create-only.
        Each source is opened once and checked against its ETag on that descriptor,
        so the bytes copied are those of the named version (see ObjectStore)."""
        self._path(dest)
        check_compose_parts(dest, parts, self.min_part_size)
        tmp = Path(self.staging_dir()) / f"{uuid.uuid4().hex}.compose.tmp"
        copied = uploaded = 0
        try:
            with self._write_errors(dest):
                with open(tmp, "wb") as out:
                    for part in parts:
                        if isinstance(part, CopyFrom):
                            self._copy_range_into(out, part)
                            copied += part.size
                        else:
                            out.write(part)
                            uploaded += len(part)
                return self._link_staged(dest, tmp, COMPOSE, uploaded=uploaded, copied=copied)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def _copy_range_into(self, out: BinaryIO, part: CopyFrom) -> None:
        path = self._path(part.key)
        try:
            fd = os.open(path, _READ_FLAGS)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise NotFound(f"compose source {part.key!r} is gone from {self.uri}",
                           key=part.key) from None
        try:
            st = os.fstat(fd)
            if etag_from_stat(st) != normalize_etag(part.etag):
                raise PreconditionFailed(
                    f"compose source {part.key!r} changed: ETag is {etag_from_stat(st)}, "
                    f"expected {normalize_etag(part.etag)}", key=part.key)
            if part.end > st.st_size:
                from caslake.errors import InvalidArgument

                raise InvalidArgument(f"compose copies [{part.start}, {part.end}) of "
                                      f"{part.key!r}, which has {st.st_size} bytes")
            pos = part.start
            while pos < part.end:
                chunk = os.pread(fd, min(self._COPY_CHUNK, part.end - pos), pos)
                if not chunk:
                    raise StoreError(f"{part.key!r} ended early while copying", key=part.key)
                out.write(chunk)
                pos += len(chunk)
        finally:
            os.close(fd)
