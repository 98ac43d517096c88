"""The one error tree of caslake.

Every error the library raises on purpose is a :class:`CaslakeError`.  The
subclasses are grouped by what the caller should do about them:

* :class:`UserInputError` -- fix the call (schema, predicate, argument).
* :class:`TableNotFound` / :class:`TableAlreadyExists` -- the table is not in
  the state the call assumed.
* :class:`CommitConflict` -- another writer won; nothing was applied.  By what
  to do next: :class:`ConcurrentModification` (recompute and re-run),
  :class:`ReadValidationFailed` (read again, then recompute),
  :class:`RetryBudgetExhausted` (retry later), :class:`WriterOutlivedGc` (the
  operation ran past a gc that may have collected its uploads: run it again).
* :class:`CommitOutcomeUnknown` -- the outcome could not be settled; read the
  table before retrying.
* :class:`CorruptMetadata` -- something on storage is damaged; run
  ``caslake verify``; do not retry blindly.
* :class:`StoreError` and its subclasses -- the object store said no, or could
  not be reached.
* Datasets (:mod:`caslake.dataset`, RFC-0008) reuse the groups above:
  :class:`DatasetNotFound` is a :class:`NotFound`, :class:`DatasetAlreadyExists`
  an :class:`AlreadyExists`, :class:`DatasetConflict` a :class:`CommitConflict`,
  :class:`ManifestCorrupted` a :class:`CorruptMetadata`; :class:`DatasetIncomplete`
  (no ``_SUCCESS``, or a listed part is missing) stands on its own.

Lower-layer exceptions (obstore, botocore, OSError, json) are mapped to these
in exactly one place per layer; they never escape the public API.
"""

from __future__ import annotations


class CaslakeError(Exception):
    """Root of every error raised by caslake.

    Examples:
        >>> import caslake
        >>> try:
        ...     caslake.open_table('memory://nowhere')
        ... except caslake.CaslakeError as e:
        ...     print(type(e).__name__)
        TableNotFound
    """


# --- user input -------------------------------------------------------------


class UserInputError(CaslakeError):
    """The call itself is wrong; fix the arguments and call again."""


class InvalidArgument(UserInputError):
    """An argument has a value caslake cannot use."""


class UnsupportedType(InvalidArgument):
    """A column (or a field inside one) has a type no table can hold, because
    Parquet, Iceberg or Spark cannot represent it.  ``path`` is the field's full
    dotted path (``payload.items.element.price``); the message suggests a cast."""

    def __init__(self, message: str, *, path: str, type: str) -> None:
        super().__init__(message)
        self.path = path
        self.type = type


class InvalidPartitionSpec(InvalidArgument):
    """A ``partition_by`` item that cannot be a partition field: an unknown transform,
    ``bucket(0)``, a column the schema lacks, a transform the column's type does not
    fit.  ``item`` is the item as given, ``column`` the column it names (if any)."""

    def __init__(self, message: str, *, item: str = "", column: str | None = None) -> None:
        super().__init__(message)
        self.item = item
        self.column = column


class SchemaMismatch(UserInputError):
    """Data does not match the table schema."""

    def __init__(self, message: str, *, column: str | None = None,
                 expected: str | None = None, actual: str | None = None) -> None:
        super().__init__(message)
        self.column = column
        self.expected = expected
        self.actual = actual


class InputDataError(UserInputError):
    """A cell of an input file cannot be read as its column's type.

    ``line`` is the 1-based line of the file (the header is line 1), ``column``
    the column name and ``value`` the text of the cell."""

    def __init__(self, message: str, *, path: str, line: int, column: str,
                 value: str | None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line
        self.column = column
        self.value = value


class RowsOutsideWhere(InputDataError):
    """``overwrite(data, where=...)`` got rows that the predicate does not match
    (FALSE or NULL): replacing them would not be a replacement of those rows.
    ``rows`` counts them, ``first`` is the first one (by column); as an
    :class:`InputDataError`, ``path`` is ``"data"``, ``line`` the first one's 1-based
    row number in the data, ``column`` the predicate's text, ``value`` the row's repr."""

    def __init__(self, message: str, *, rows: int, first: dict[str, object], row: int,
                 where: str) -> None:
        super().__init__(message, path="data", line=row, column=where, value=repr(first))
        self.rows = rows
        self.first = first


class DuplicateKey(UserInputError):
    """An upsert's input holds one key more than once (``key``: one such key, by column)."""

    def __init__(self, message: str, *, key: dict[str, object], count: int) -> None:
        super().__init__(message)
        self.key = key
        self.count = count


class OptionalDependencyMissing(UserInputError):
    """A method needs a package that is not installed (``package``: what to install)."""

    def __init__(self, message: str, *, package: str) -> None:
        super().__init__(message)
        self.package = package


class InvalidPredicate(UserInputError):
    """A ``where`` predicate is malformed or cannot be applied."""


class ExportUnsupportedType(UserInputError):
    """A column's type has no one-to-one counterpart in the export format
    (Iceberg or Delta); nothing was written.  ``column`` and ``type`` name it."""

    def __init__(self, message: str, *, column: str, type: str, target: str) -> None:
        super().__init__(message)
        self.column = column
        self.type = type
        self.target = target


class ExportColumnsDiverged(ExportUnsupportedType):
    """The Delta export cannot show ``column``: its live data files store it (or
    another column under its name) under Parquet names no single Delta
    ``physicalName`` can cover (a rename or drop-and-re-add after files were
    written; Delta readers match columns by physical name, not field id).
    ``files`` names some of them; nothing was written.  Rewrite those files
    (``compact``) or export to Iceberg, which matches by field id."""

    def __init__(self, message: str, *, column: str, type: str, files: list[str]) -> None:
        super().__init__(message, column=column, type=type, target="Delta")
        self.files = files


class ExportOnCommitEnabled(UserInputError):
    """``drop_export`` refused: the table property ``property`` (``export.iceberg`` or
    ``export.delta``) would write the export again on the next commit; set it to
    ``false`` first.  Nothing was deleted."""

    def __init__(self, format: str, property: str) -> None:
        super().__init__(f"cannot drop the {format} export: the table property "
                         f"{property}=true writes it again on every commit; set "
                         f"{property}=false first (caslake properties URI --set "
                         f"{property}=false)")
        self.format = format
        self.property = property


class UnknownColumn(InvalidPredicate):
    """A predicate or projection names a column the table does not have."""

    def __init__(self, column: str, available: list[str]) -> None:
        super().__init__(
            f"unknown column {column!r}; the table has: {', '.join(available) or '(none)'}"
        )
        self.column = column
        self.available = available


class UnknownField(UnknownColumn):
    """A predicate names a field a struct does not have.  ``column`` is the full
    dotted path (``device.osx``), ``parent`` the struct's path (``device``) and
    ``available`` the fields the struct has."""

    def __init__(self, path: str, parent: str, available: list[str]) -> None:
        InvalidPredicate.__init__(
            self, f"unknown field {path!r}: struct {parent!r} has fields "
                  f"{', '.join(available) or '(none)'}")
        self.column = path
        self.parent = parent
        self.available = available


class TablesOnDifferentStores(InvalidArgument):
    """A multi-table transaction or snapshot was given tables on different stores
    (another bucket, endpoint or backend): its record could not be read by all."""

    def __init__(self, message: str, *, uris: list[str]) -> None:
        super().__init__(message)
        self.uris = uris


class CloneAcrossProviders(InvalidArgument):
    """A clone was asked from a table on one storage provider (local files, S3, GCS,
    Azure Blob, memory) to a location on another.  A clone reads its source's files
    where they lie, through the same storage options, so both must be on one provider
    (any buckets or containers of it)."""

    def __init__(self, source: str, target: str, *, source_provider: str,
                 target_provider: str) -> None:
        super().__init__(
            f"cannot clone {source} ({source_provider}) to {target} ({target_provider}): "
            "a clone references its source's files where they lie, so source and clone "
            f"must be on one provider; clone within {source_provider}, or write a copy "
            "(create_table at the target and append the source's scan)")
        self.source = source
        self.target = target
        self.source_provider = source_provider
        self.target_provider = target_provider


class NativeReadUnsupported(InvalidArgument):
    """``caslake.spark.read_native`` on a store Spark's Parquet reader cannot reach here
    (Azure Blob, GCS: their Hadoop connectors are not bundled); the data source reads
    it.  (Also importable from ``caslake.spark.native``, where it was first defined.)"""


class TableListedTwice(InvalidArgument):
    """A multi-table transaction or snapshot was given the same table twice."""

    def __init__(self, message: str, *, uri: str) -> None:
        super().__init__(message)
        self.uri = uri


class InvalidRefName(InvalidArgument):
    """A branch or tag name is not valid (empty, ``..``, ``/`` at an end, control
    characters, ...).  ``name`` is the name, ``reason`` why it is refused."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"invalid ref name {name!r}: {reason}")
        self.name = name
        self.reason = reason


class RefNotFound(UserInputError):
    """No branch or tag of that name exists (a dropped tag counts as absent)."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"no {kind} named {name!r}")
        self.kind = kind
        self.name = name


class RefAlreadyExists(UserInputError):
    """A branch or tag of that name exists, or (tags) existed: a dropped tag's name
    is never reused, so no reader can see other data under it."""

    def __init__(self, kind: str, name: str, *, retired: bool = False) -> None:
        what = (f"tag {name!r} was dropped and its name can never be reused"
                if retired else f"a {kind} named {name!r} already exists")
        super().__init__(what)
        self.kind = kind
        self.name = name
        self.retired = retired


class RefInUse(UserInputError):
    """A ref cannot be dropped because something still needs it; ``holders`` names
    each of them (e.g. ``tag 'q3'``, ``clone s3://b/t2``)."""

    def __init__(self, kind: str, name: str, holders: list[str]) -> None:
        super().__init__(f"cannot drop {kind} {name!r}: still needed by "
                         f"{', '.join(holders)}; drop those first")
        self.kind = kind
        self.name = name
        self.holders = holders


class ErasureHeld(RefInUse):
    """``purge(expire=True)`` refused: a live ref (another branch's retained history,
    a tag), a clone hold or an export still needs a version whose objects hold values
    to be erased, so they could not be deleted.  ``holders`` names each of them; nothing
    was purged or expired."""

    def __init__(self, holders: list[str]) -> None:
        UserInputError.__init__(
            self, f"purge(expire=True) cannot erase the matching rows: versions holding "
                  f"them are still needed by {', '.join(holders)}; drop or move those first, "
                  "or purge without expire")
        self.kind = "purge"
        self.name = ""
        self.holders = holders


class InvalidSchemaChange(UserInputError):
    """A schema change is not allowed (an incompatible widening, a rename onto an
    existing name, dropping the last column, an unknown column...).  ``column``
    names the column at fault."""

    def __init__(self, message: str, *, column: str | None = None) -> None:
        super().__init__(message)
        self.column = column
class AmbiguousColumn(InvalidPredicate):
    """A column name matches several columns case-insensitively and none exactly."""

    def __init__(self, column: str, candidates: list[str]) -> None:
        super().__init__(
            f"column {column!r} is ambiguous: it matches {', '.join(map(repr, candidates))} "
            "ignoring case; write the exact name (double-quoted in SQL)"
        )
        self.column = column
        self.candidates = candidates


class PredicateSyntaxError(InvalidPredicate):
    """A SQL ``where`` text does not parse; the message gives the position."""


class UnknownFunction(InvalidPredicate):
    """A predicate calls a function caslake does not evaluate."""

    def __init__(self, name: str, available: list[str]) -> None:
        super().__init__(
            f"unknown function {name!r}; supported functions: {', '.join(available)}"
        )
        self.function = name
        self.available = available


class UnsupportedExpression(InvalidPredicate):
    """A predicate uses a SQL construct caslake does not evaluate (named in the message)."""


class PredicateEvaluationError(InvalidPredicate):
    """Evaluating a predicate on the data failed (a CAST that cannot convert a
    value, an integer overflow in arithmetic); nothing is returned or changed."""


# --- table state ------------------------------------------------------------


class TableNotFound(CaslakeError):
    """No table exists at the URI."""


class TableAlreadyExists(CaslakeError):
    """A table already exists at the URI."""


class VersionNotFound(UserInputError):
    """The requested version or timestamp is not in the table's history."""


class VersionExpired(VersionNotFound):
    """The requested version (or the version a change feed needs before it) was
    expired by gc.  ``oldest_readable`` is the oldest one that can still be asked for."""

    def __init__(self, message: str, *, oldest_readable: int) -> None:
        super().__init__(message)
        self.oldest_readable = oldest_readable


# --- commit -----------------------------------------------------------------


class CommitConflict(CaslakeError):
    """The commit could not be applied because other writers moved the table.

    Nothing of it was applied.  The subclasses say what the caller should do
    next; ``help`` says it in words.  ``except CommitConflict`` catches them all.
    """

    default_help = "re-run the operation against the new table version"

    def __init__(self, message: str, *, attempts: int = 0, help: str | None = None) -> None:
        help = help or self.default_help
        super().__init__(f"{message} (help: {help})")
        self.attempts = attempts
        self.help = help


class ConcurrentModification(CommitConflict):
    """A concurrent commit changed what this operation was planned on (the base
    version, the schema, a file it rewrites): recompute the change on the new
    version and run it again."""

    default_help = "re-run the operation so it is planned on the new table version"


class ReadValidationFailed(CommitConflict):
    """A change computed from rows read at ``read_version`` would commit over a
    concurrent change to rows it could match: read again, then recompute."""

    default_help = "read the table again and recompute the change"


class RetryBudgetExhausted(CommitConflict):
    """Other writers kept winning the pointer until the retry budget ran out; the
    change itself is still valid: retry later (or commit less often)."""

    default_help = "retry later, or lower the commit rate on this table"


class TxnAlreadyApplied(CommitConflict):
    """A commit tagged with this ``(app id, version)`` has already landed: there is
    nothing left to do.  The commit loop turns it into a no-op; it does not reach
    callers of the public API."""

    default_help = "nothing to do: this (app id, version) is already committed"


class BranchDiverged(CommitConflict):
    """A fast-forward or merge found the target branch changed since the source
    forked from it in a way the operation cannot reconcile; nothing was applied."""

    default_help = ("merge the target into the source (or re-create the source from "
                    "the target) and try again")

    def __init__(self, message: str, *, target: str, source: str) -> None:
        super().__init__(message)
        self.target = target
        self.source = source


class WriterOutlivedGc(CommitConflict):
    """The operation began uploading before objects that a gc run has since collected
    (``started_at_ms`` <= ``collected_until_ms``, the fence gc committed): its own
    uploads may be among them, so it must not commit.  Nothing was applied."""

    default_help = ("run the operation again (it ran longer than gc's retention; keep "
                    "the retention above the longest write)")

    def __init__(self, message: str, *, started_at_ms: int, collected_until_ms: int) -> None:
        super().__init__(message)
        self.started_at_ms = started_at_ms
        self.collected_until_ms = collected_until_ms


class TransactionAborted(CommitConflict):
    """A multi-table transaction was aborted before its commit point: by another
    writer that met one of its staged versions after its deadline (it ran too
    long).  Nothing of it is visible in any table."""

    default_help = "run the transaction again (with a longer ttl_ms if it is slow)"


class CommitOutcomeUnknown(CaslakeError):
    """The pointer write may or may not have applied and it could not be read back.

    Nothing written by the commit has been deleted.  Open the table and look
    for ``commit_id`` in its history before retrying.  ``version`` is the
    version the last attempt aimed at (None if not known): once the table has
    reached it without that commit id, the commit can no longer land.
    """

    def __init__(self, message: str, *, commit_id: str, version: int | None = None) -> None:
        super().__init__(f"{message} (commit id {commit_id})")
        self.commit_id = commit_id
        self.version = version


# --- corrupt state ----------------------------------------------------------


class CorruptMetadata(CaslakeError):
    """An object on storage is not what the format says it must be."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"corrupt metadata in {key!r}: {reason}")
        self.key = key
        self.reason = reason


class UnsupportedFormatVersion(CorruptMetadata):
    """An object was written by a newer format than this reader knows."""


# --- store ------------------------------------------------------------------


class StoreError(CaslakeError):
    """The object store refused or failed a request."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class NotFound(StoreError):
    """The object does not exist."""


class AlreadyExists(StoreError):
    """A create-only put found the object already there (HTTP 412)."""


class PreconditionFailed(StoreError):
    """A compare-and-swap precondition did not hold: the object changed (HTTP 412/409)."""


class TransientStoreError(StoreError):
    """A retryable failure: throttling (503 SlowDown), a reset, a timeout."""


class PutOutcomeUnknown(StoreError):
    """A compare-and-swap put failed in a way that leaves its outcome
    unknown (reply lost, timeout, reset, 5xx): it may have applied, or may still
    apply.  It is never retried blindly: the caller settles it by reading the
    object back (the commit loop looks for its commit id in the pointer)."""


class StoreConfigError(StoreError):
    """The store URI or its options are unusable (bad URI, credentials, bucket)."""


class StoreCapabilityUnsupported(StoreError):
    """The backend does not offer an optional capability (e.g. an S3-compatible endpoint
    that rejects UploadPartCopy).  Callers fall back to a path without it."""


# --- datasets (caslake.dataset, RFC-0008) ----------------------------------------


class DatasetNotFound(NotFound):
    """No dataset manifest exists at the dataset key."""


class DatasetAlreadyExists(AlreadyExists):
    """``write_dataset`` without ``overwrite=True`` found a dataset at the key
    (or a manifest whose writer has not finished or crashed)."""


class DatasetConflict(CommitConflict):
    """An overwrite lost the race: another writer switched the dataset after this
    write started.  Nothing of this write became visible."""


class DatasetIncomplete(CaslakeError):
    """The dataset cannot be read whole: ``_SUCCESS`` is missing, or a part the
    manifest lists is missing or changed.  Never a partial read: wait for the
    writer, or write the dataset again."""

    def __init__(self, message: str, *, dataset_key: str, part: str | None = None) -> None:
        super().__init__(message)
        self.dataset_key = dataset_key
        self.part = part


class ManifestCorrupted(CorruptMetadata):
    """A dataset's ``manifest.json`` is not valid JSON, lacks a field, has a field
    of the wrong type, or disagrees with its parts (row count, schema hash)."""

    def __init__(self, key: str, reason: str, *, part: str | None = None) -> None:
        super().__init__(key, reason)
        self.part = part


# --- Spark --------------------------------------------------------------------------


class StreamingQueryFailed(CaslakeError):
    """A Spark streaming query that caslake started and waited for (a pipeline stage of
    :mod:`caslake.spark.pipeline`, or the demo's ingest) stopped with an error.
    ``query`` names it (a stage's txn app id, with its source and target), ``cause``
    is Spark's message, where a caslake error raised in a micro-batch keeps its class
    name.  The checkpoint holds the query's progress: fix the cause and run it again;
    it resumes at the batch that failed."""

    def __init__(self, message: str, *, query: str, cause: str) -> None:
        super().__init__(message)
        self.query = query
        self.cause = cause


class DemoCheckFailed(CaslakeError):
    """``make demo`` compared a result with one computed independently (Spark's own
    aggregation, a scan of every Parquet file on storage) and they differ: a defect
    in caslake, not in the call.  ``check`` names the comparison; please report it
    with the demo's output."""

    def __init__(self, message: str, *, check: str) -> None:
        super().__init__(message)
        self.check = check


# --- optional extras --------------------------------------------------------------


#: The former name of :class:`OptionalDependencyMissing` (``caslake.dataset.dagster``
#: raised it); kept as an alias so ``except MissingDependency`` still catches.
MissingDependency = OptionalDependencyMissing
