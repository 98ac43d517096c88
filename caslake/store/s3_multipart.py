"""S3 multipart uploads for :meth:`S3Store.compose` and for gc's stale-upload sweep.

Owns every multipart call caslake makes (through boto3: obstore has no
UploadPartCopy): CreateMultipartUpload, UploadPartCopy with an inclusive
``CopySourceRange`` and ``CopySourceIfMatch``, UploadPart, CompleteMultipartUpload
(create-only, ``If-None-Match: *``), AbortMultipartUpload and ListMultipartUploads,
and the mapping of their botocore errors to caslake errors.

Rules it keeps (RELIABILITY.md item 14):

* every copied range names the source ETag; since some servers (moto) ignore
  ``x-amz-copy-source-if-match`` on UploadPartCopy, every source is HEADed again
  after completion, and a changed source deletes the new object and raises
  PreconditionFailed;
* any failure aborts the upload, so no parts are left billed;
* a 409, a vanished upload (NoSuchUpload: gc aborted it) or a failed
  CompleteMultipartUpload starts over with a *new* upload, a bounded number of times;
* a Complete whose reply was lost is recognised by the multipart ETag it must have
  produced (MD5 of the part MD5s, ``-N``), so the object is never assembled twice;
* an endpoint that rejects UploadPartCopy raises StoreCapabilityUnsupported.

Every request is counted in the store's counters.  Never used for ordinary reads
and writes.
"""

from __future__ import annotations

import binascii
import contextlib
import hashlib
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from caslake.errors import (
    AlreadyExists,
    CaslakeError,
    InvalidArgument,
    NotFound,
    PreconditionFailed,
    StoreCapabilityUnsupported,
    StoreConfigError,
    StoreError,
    TransientStoreError,
)
from caslake.store.base import (
    MPU_ABORT,
    MPU_COMPLETE,
    MPU_COPY_PART,
    MPU_CREATE,
    MPU_LIST,
    MPU_UPLOAD_PART,
    ComposePart,
    CopyFrom,
    MultipartUpload,
    check_compose_parts,
    normalize_etag,
)
from caslake.store.keys import check_key, check_prefix

if TYPE_CHECKING:
    from caslake.store.s3 import S3Store

#: New uploads tried after a 409, a vanished upload or a failed Complete.
MAX_UPLOAD_ATTEMPTS = 3

_UNSUPPORTED_CODES = frozenset({"NotImplemented", "NotSupported", "XNotImplemented",
                                "UnsupportedOperation"})


class _StartOver(Exception):
    """This upload cannot finish; a new one may (carries the error to report)."""

    def __init__(self, error: CaslakeError) -> None:
        super().__init__(str(error))
        self.error = error


def _code_and_status(exc: BaseException) -> tuple[str, int]:
    response: dict[str, Any] = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code, status


def map_boto_error(exc: BaseException, *, op: str, key: str | None,
                   where: str) -> CaslakeError:
    """The caslake error for a botocore exception from a multipart call."""
    if isinstance(exc, CaslakeError):
        return exc
    from botocore.exceptions import BotoCoreError, ClientError

    detail = f"{op} {key!r} on {where}: {exc}"
    if isinstance(exc, ClientError):
        code, status = _code_and_status(exc)
        if code in _UNSUPPORTED_CODES or status == 501:
            return StoreCapabilityUnsupported(detail, key=key)
        if code in ("NoSuchKey", "NoSuchUpload") or status == 404:
            if code == "NoSuchBucket":
                return StoreConfigError(detail, key=key)
            return NotFound(detail, key=key)
        if code == "PreconditionFailed" or status == 412:
            return PreconditionFailed(detail, key=key)
        if status == 409:
            return PreconditionFailed(detail, key=key)
        if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return StoreConfigError(detail, key=key)
        if code in ("EntityTooSmall", "InvalidPart", "InvalidPartOrder", "InvalidRange",
                    "InvalidArgument"):
            return InvalidArgument(detail)
        if status >= 500 or code in ("SlowDown", "RequestTimeout", "InternalError"):
            return TransientStoreError(detail, key=key)
        return StoreError(detail, key=key)
    if isinstance(exc, BotoCoreError | OSError):
        return TransientStoreError(detail, key=key)
    return StoreError(detail, key=key)


def multipart_etag(part_etags: Sequence[str]) -> str:
    """The ETag S3 gives an object completed from parts with these ETags."""
    digest = hashlib.md5(usedforsecurity=False)
    for tag in part_etags:
        digest.update(binascii.unhexlify(normalize_etag(tag).strip('"')))
    return f'"{digest.hexdigest()}-{len(part_etags)}"'


class _Upload:
    """One multipart upload of ``dest`` on ``store``."""

    def __init__(self, store: S3Store, dest: str) -> None:
        self.store = store
        self.dest = dest
        self.key = store.full_key(dest)
        self.client = store.boto3_client()
        self.upload_id: str | None = None

    def _fail(self, exc: BaseException, op: str, key: str | None = None) -> CaslakeError:
        return map_boto_error(exc, op=op, key=key or self.dest, where=self.store.uri)

    def create(self) -> None:
        self.store.counters.record(MPU_CREATE)
        try:
            resp = self.client.create_multipart_upload(Bucket=self.store.bucket, Key=self.key)
        except Exception as exc:
            raise self._fail(exc, "CreateMultipartUpload") from exc
        self.upload_id = str(resp["UploadId"])

    def part(self, number: int, part: ComposePart) -> str:
        assert self.upload_id is not None
        if isinstance(part, CopyFrom):
            self.store.counters.record(MPU_COPY_PART)
            try:
                resp = self.client.upload_part_copy(
                    Bucket=self.store.bucket, Key=self.key, UploadId=self.upload_id,
                    PartNumber=number,
                    CopySource={"Bucket": self.store.bucket,
                                "Key": self.store.full_key(part.key)},
                    # x-amz-copy-source-range is inclusive at both ends
                    CopySourceRange=f"bytes={part.start}-{part.end - 1}",
                    CopySourceIfMatch=normalize_etag(part.etag))
            except Exception as exc:
                err = self._fail(exc, "UploadPartCopy", part.key)
                code, _ = _code_and_status(exc)
                if code == "NoSuchUpload" or _is_conflict(exc):
                    raise _StartOver(err) from exc
                raise err from exc
            # Bytes count only once copied: a rejected copy moved nothing.
            self.store.counters.record(MPU_COPY_PART, count=0, bytes_copied=part.size)
            return str(resp["CopyPartResult"]["ETag"])
        self.store.counters.record(MPU_UPLOAD_PART, bytes_out=len(part))
        try:
            resp2 = self.client.upload_part(Bucket=self.store.bucket, Key=self.key,
                                            UploadId=self.upload_id, PartNumber=number,
                                            Body=part)
        except Exception as exc:
            err = self._fail(exc, "UploadPart")
            if isinstance(err, NotFound | TransientStoreError | PreconditionFailed):
                raise _StartOver(err) from exc
            raise err from exc
        return str(resp2["ETag"])

    def complete(self, part_etags: list[str]) -> str:
        assert self.upload_id is not None
        expected = multipart_etag(part_etags)
        self.store.counters.record(MPU_COMPLETE)
        try:
            resp = self.client.complete_multipart_upload(
                Bucket=self.store.bucket, Key=self.key, UploadId=self.upload_id,
                MultipartUpload={"Parts": [{"PartNumber": i + 1, "ETag": tag}
                                           for i, tag in enumerate(part_etags)]},
                IfNoneMatch="*")
        except Exception as exc:
            err = self._fail(exc, "CompleteMultipartUpload")
            landed = self._landed_etag(expected)
            if landed is not None:
                return landed  # our Complete applied; its reply was lost
            if isinstance(err, PreconditionFailed) and not _is_conflict(exc):
                raise AlreadyExists(f"object {self.dest!r} already exists in "
                                    f"{self.store.uri}", key=self.dest) from exc
            if isinstance(err, InvalidArgument | StoreConfigError):
                raise err from exc
            raise _StartOver(err) from exc
        return normalize_etag(str(resp["ETag"]))

    def _landed_etag(self, expected: str) -> str | None:
        try:
            meta = self.store.head(self.dest)
        except StoreError:
            return None
        return meta.etag if meta.etag == expected else None

    def abort(self) -> None:
        if self.upload_id is None:
            return
        self.store.counters.record(MPU_ABORT)
        with contextlib.suppress(Exception):  # best effort: gc sweeps what is left
            self.client.abort_multipart_upload(Bucket=self.store.bucket, Key=self.key,
                                               UploadId=self.upload_id)
        self.upload_id = None


def _is_conflict(exc: BaseException) -> bool:
    _, status = _code_and_status(exc)
    return status == 409


def compose(store: S3Store, dest: str, parts: Sequence[ComposePart]) -> str:
    """See :meth:`caslake.store.base.ObjectStore.compose`."""
    check_key(dest)
    check_compose_parts(dest, parts, store.min_part_size)
    for part in parts:
        if isinstance(part, CopyFrom):
            check_key(part.key)
    last: CaslakeError | None = None
    for _ in range(MAX_UPLOAD_ATTEMPTS):
        upload = _Upload(store, dest)
        try:
            upload.create()
            etags = _upload_parts(store, upload, parts)
            etag = upload.complete(etags)
        except _StartOver as restart:
            upload.abort()
            last = restart.error
            continue
        except BaseException:
            upload.abort()
            raise
        _check_sources_unchanged(store, dest, parts)
        return etag
    assert last is not None
    raise last


def _upload_parts(store: S3Store, upload: _Upload, parts: Sequence[ComposePart]) -> list[str]:
    if len(parts) == 1:
        return [upload.part(1, parts[0])]
    etags, errors = store.run_parallel([partial(upload.part, i + 1, p)
                                        for i, p in enumerate(parts)])
    if errors:
        # A source change explains the other failures; a restart only if all agree.
        for err in errors:
            if not isinstance(err, _StartOver):
                raise err
        raise errors[0]
    return etags


def _check_sources_unchanged(store: S3Store, dest: str, parts: Sequence[ComposePart]) -> None:
    """HEAD each source again: some servers ignore copy-source-if-match."""
    wanted = {p.key: normalize_etag(p.etag) for p in parts if isinstance(p, CopyFrom)}
    for key, etag in wanted.items():
        try:
            current = store.head(key).etag
        except NotFound:
            current = None
        if current != etag:
            store.delete(dest)
            raise PreconditionFailed(
                f"compose source {key!r} changed while {dest!r} was assembled "
                f"(ETag {current}, expected {etag}); the new object was deleted", key=key)


def list_uploads(store: S3Store, prefix: str = "") -> list[MultipartUpload]:
    """Unfinished uploads under ``prefix`` (keys relative to the store root)."""
    check_prefix(prefix)
    client = store.boto3_client()
    root = store.full_key("") if store.prefix else ""
    out: list[MultipartUpload] = []
    kwargs: dict[str, Any] = {"Bucket": store.bucket, "Prefix": root + prefix}
    while True:
        store.counters.record(MPU_LIST)
        try:
            resp = client.list_multipart_uploads(**kwargs)
        except Exception as exc:
            raise map_boto_error(exc, op="ListMultipartUploads", key=prefix,
                                 where=store.uri) from exc
        for up in resp.get("Uploads", []):
            key = str(up["Key"])
            if key.startswith(root):
                out.append(MultipartUpload(key[len(root):], str(up["UploadId"]),
                                           up.get("Initiated")))
        if not resp.get("IsTruncated"):
            return out
        kwargs["KeyMarker"] = resp.get("NextKeyMarker")
        kwargs["UploadIdMarker"] = resp.get("NextUploadIdMarker")


def abort_upload(store: S3Store, upload: MultipartUpload) -> None:
    store.counters.record(MPU_ABORT)
    try:
        store.boto3_client().abort_multipart_upload(
            Bucket=store.bucket, Key=store.full_key(upload.key), UploadId=upload.upload_id)
    except Exception as exc:
        err = map_boto_error(exc, op="AbortMultipartUpload", key=upload.key, where=store.uri)
        if not isinstance(err, NotFound):
            raise err from exc
