"""``caslake.spark.save(df, uri, mode=...)``: Spark's save modes for caslake tables.

PySpark 4.3 accepts only ``append`` and ``overwrite`` for Python data sources
and refuses ``errorifexists`` (its default), ``error`` and ``ignore`` before
caslake runs.  ``save`` gives all five their Spark meaning:

* ``errorifexists`` / ``error``: TableAlreadyExists if a table is at ``uri``,
  else create it from the DataFrame's schema and write;
* ``ignore``: do nothing if a table is at ``uri``, else create and write;
* ``append``: add the rows (creating the table if there is none);
* ``overwrite``: replace every row (creating the table if there is none);
  with ``partitionOverwriteMode="dynamic"`` only the partitions the DataFrame has
  rows in (under the table's partition spec) are replaced, in one commit: every
  live row of those partitions is deleted, other partitions are untouched (Spark's
  and Delta's dynamic partition overwrite).  On an unpartitioned table it replaces
  every row, as Delta does.  Any commit landing during the job is a conflict
  (ConcurrentModification), as for a full overwrite.

Each write is one commit (``df.write.format("caslake")`` underneath).  The
existence check and the write are two steps: a table created by someone else
in between is appended to, as a concurrent ``append`` would be.

A caslake error raised inside Spark reaches the caller as that caslake error,
first line ``SchemaMismatch: <message>``, instead of Spark's multi-line
``PYTHON_DATA_SOURCE_ERROR`` (kept as ``spark_error`` on the exception).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import time
from collections.abc import Iterator, Mapping
from typing import cast

from pyspark.sql import DataFrame

from caslake import errors
from caslake.errors import CaslakeError, InvalidArgument, SchemaMismatch, TableAlreadyExists
from caslake.format.keys import POINTER_KEY, new_token
from caslake.format.manifest import DataFile
from caslake.spark.arrow_jobs import map_in_arrow
from caslake.spark.commit import abort_files, commit_files
from caslake.spark.messages import table_schema_from_json
from caslake.spark.write import (
    PARTITION_OVERWRITE_MODE,
    WriteTarget,
    data_file,
    dynamic_overwrite,
    txn_from_options,
    written_files_task,
)
from caslake.store import open_store
from caslake.store.options import StorageOptions

MODES = ("errorifexists", "error", "ignore", "append", "overwrite")
# the last line of the Python traceback Spark embeds in its error text
_CASLAKE_ERROR = re.compile(r"caslake\.errors\.(\w+): (.+)")
# the column a SchemaMismatch message names first ("column 'v' is not nullable ...")
_COLUMN = re.compile(r"column '([^']+)'")


def save(df: DataFrame, uri: str, mode: str = "errorifexists", *,
         storage_options: StorageOptions | None = None,
         options: Mapping[str, str] | None = None,
         partitionOverwriteMode: str | None = None) -> None:
    """Write ``df`` to the table at ``uri`` with Spark's save ``mode`` semantics.
    ``options`` go to the writer (e.g. ``txnAppId`` / ``txnVersion``).
    ``partitionOverwriteMode="dynamic"`` with ``mode="overwrite"``: replace only the
    partitions ``df`` has rows in (see the module docstring).

    Examples:
        >>> caslake.spark.save(df, '/data/events', mode='append')  # doctest: +SKIP
    """
    mode = mode.lower() if isinstance(mode, str) else mode
    if mode not in MODES:
        raise InvalidArgument(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    options = dict(options or {})
    if partitionOverwriteMode is not None:
        options[PARTITION_OVERWRITE_MODE] = partitionOverwriteMode
    dynamic = dynamic_overwrite(options.pop(PARTITION_OVERWRITE_MODE, None))
    if dynamic and mode == "overwrite" and _overwrite_partitions(df, uri, storage_options,
                                                                 options):
        return
    if mode in ("errorifexists", "error", "ignore"):
        exists = open_store(uri, storage_options).exists(POINTER_KEY)
        if exists and mode == "ignore":
            return
        if exists:
            raise TableAlreadyExists(f"a table already exists at {uri} (mode={mode!r}; use "
                                     "mode='append' or mode='overwrite' to write to it)")
    writer = df.write.format("caslake").mode("overwrite" if mode == "overwrite" else "append")
    for k, v in options.items():
        writer = writer.option(k, v)
    for key, value in (storage_options or {}).items():
        writer = writer.option(f"storage.{key}", str(value))
    with caslake_errors():
        writer.save(uri)


def _overwrite_partitions(df: DataFrame, uri: str, storage_options: StorageOptions | None,
                          options: Mapping[str, str]) -> bool:
    """A dynamic partition overwrite: Spark tasks write ``df``'s rows (files split by
    the table's partition spec), the driver commits them once with the rows of the
    partitions they fill deleted.  False (nothing done) when there is no table yet:
    the caller's plain overwrite creates it."""
    target = WriteTarget(uri, cast(StorageOptions, dict(storage_options or {})), df.schema)
    if target.start_version is None:
        return False
    txn = txn_from_options(options)
    job_id = new_token()
    started_at_ms = int(time.time() * 1000)
    files = spark_written_files(df, target, job_id)
    schema = table_schema_from_json(target.table_schema)
    store = target.open_store()
    params = {"engine": "spark", PARTITION_OVERWRITE_MODE: "dynamic"}
    try:
        commit_files(store, uri=uri, storage_options=target.storage_options, schema=schema,
                     files=files, start_version=target.start_version, commit_id=job_id,
                     overwrite=True, txn=txn, params=params, started_at_ms=started_at_ms,
                     dynamic=True)
    except BaseException:
        abort_files(store, files, commit_id=job_id, start_version=target.start_version,
                    txn=txn)
        raise
    return True


def spark_written_files(df: DataFrame, target: WriteTarget, job_id: str | None = None
                        ) -> list[DataFile]:
    """Spark tasks write ``df``'s rows as data files of ``target`` (split by its
    partition spec); the files, for the driver to commit (or remove)."""
    job = job_id or new_token()
    with caslake_errors():
        entries = map_in_arrow(df, functools.partial(written_files_task, target, job),
                               "file string").collect()
    schema = table_schema_from_json(target.table_schema)
    return [data_file(json.loads(r["file"]), schema, target.partitioning) for r in entries]


@contextlib.contextmanager
def caslake_errors() -> Iterator[None]:
    """Run a Spark action, raising a caslake error a task or the data source raised
    (wrapped by Spark) as itself; other errors pass unchanged."""
    try:
        yield
    except CaslakeError:
        raise
    except Exception as e:  # Spark's wrapper around an error raised in Python
        raised = caslake_error_from_spark(e)
        if raised is None:
            raise
        raise raised from None


def caslake_error_from_spark(exc: BaseException) -> CaslakeError | None:
    """The caslake error a Spark exception wraps (its message's first line is
    ``<ErrorName>: <message>``), or None if it wraps none."""
    found = _CASLAKE_ERROR.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, CaslakeError)):
        return None
    error: CaslakeError = cls.__new__(cls)
    Exception.__init__(error, f"{name}: {message.strip()}")
    error.spark_error = exc  # type: ignore[attr-defined]
    if isinstance(error, SchemaMismatch):  # its attributes, as far as the text has them
        column = _COLUMN.search(message)
        error.column = column.group(1) if column else None
        error.expected = error.actual = None
    return error
