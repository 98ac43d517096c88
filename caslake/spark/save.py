"""``caslake.spark.save(df, uri, mode=...)``: Spark's save modes for caslake tables.

PySpark 4.3 accepts only ``append`` and ``overwrite`` for Python data sources
and refuses ``errorifexists`` (its default), ``error`` and ``ignore`` before
caslake runs.  ``save`` gives all five their Spark meaning:

* ``errorifexists`` / ``error``: TableAlreadyExists if a table is at ``uri``,
  else create it from the DataFrame's schema and write;
* ``ignore``: do nothing if a table is at ``uri``, else create and write;
* ``append``: add the rows (creating the table if there is none);
* ``overwrite``: replace every row (creating the table if there is none).

Each write is one commit (``df.write.format("caslake")`` underneath).  The
existence check and the write are two steps: a table created by someone else
in between is appended to, as a concurrent ``append`` would be.

A caslake error raised inside Spark reaches the caller as that caslake error,
first line ``SchemaMismatch: <message>``, instead of Spark's multi-line
``PYTHON_DATA_SOURCE_ERROR`` (kept as ``spark_error`` on the exception).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pyspark.sql import DataFrame

from caslake import errors
from caslake.errors import CaslakeError, InvalidArgument, SchemaMismatch, TableAlreadyExists
from caslake.format.keys import POINTER_KEY
from caslake.store import open_store
from caslake.store.options import StorageOptions

MODES = ("errorifexists", "error", "ignore", "append", "overwrite")
# the last line of the Python traceback Spark embeds in its error text
_CASLAKE_ERROR = re.compile(r"caslake\.errors\.(\w+): (.+)")
# the column a SchemaMismatch message names first ("column 'v' is not nullable ...")
_COLUMN = re.compile(r"column '([^']+)'")


def save(df: DataFrame, uri: str, mode: str = "errorifexists", *,
         storage_options: StorageOptions | None = None,
         options: Mapping[str, str] | None = None) -> None:
    """Write ``df`` to the table at ``uri`` with Spark's save ``mode`` semantics.
    ``options`` go to the writer (e.g. ``txnAppId`` / ``txnVersion``).

    Examples:
        >>> caslake.spark.save(df, '/data/events', mode='append')  # doctest: +SKIP
    """
    mode = mode.lower() if isinstance(mode, str) else mode
    if mode not in MODES:
        raise InvalidArgument(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if mode in ("errorifexists", "error", "ignore"):
        exists = open_store(uri, storage_options).exists(POINTER_KEY)
        if exists and mode == "ignore":
            return
        if exists:
            raise TableAlreadyExists(f"a table already exists at {uri} (mode={mode!r}; use "
                                     "mode='append' or mode='overwrite' to write to it)")
    writer = df.write.format("caslake").mode("overwrite" if mode == "overwrite" else "append")
    for k, v in (options or {}).items():
        writer = writer.option(k, v)
    for key, value in (storage_options or {}).items():
        writer = writer.option(f"storage.{key}", str(value))
    try:
        writer.save(uri)
    except CaslakeError:
        raise
    except Exception as e:  # Spark's wrapper around an error raised in the data source
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
