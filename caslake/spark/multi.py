"""``caslake.spark.write_many``: Spark DataFrames appended to several tables in one
multi-table transaction (docs/protocol.md, "Multi-table transactions"), exactly
once with a ``foreachBatch``'s ``(app id, batch id)``.

Each DataFrame's rows are written as data files by Spark tasks (as
``df.write.format("caslake")`` does); the driver then stages every table's files
in one :func:`caslake.transaction` and commits it: all tables show the batch or
none does.  With ``txn=(app_id, batch_id)`` the token is recorded in every
table's version, so a batch Spark runs again (a restart after a crash between
the commit and Spark's checkpoint) is a no-op in every table: when every table
already records the token, no Spark job runs at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from pyspark.sql import DataFrame

import caslake
from caslake.core import CommitResult, check_txn, txn_applied
from caslake.errors import InvalidArgument
from caslake.ops.multi import DEFAULT_TTL_MS
from caslake.spark.save import spark_written_files
from caslake.spark.write import WriteTarget
from caslake.store.options import StorageOptions


def _checked(writes: object) -> dict[str, DataFrame]:
    if not isinstance(writes, Mapping) or not writes:
        raise InvalidArgument("writes must be a non-empty mapping of table URI -> DataFrame, "
                              f"not {type(writes).__name__}")
    out: dict[str, DataFrame] = {}
    for uri, df in writes.items():
        if not isinstance(uri, str) or not uri:
            raise InvalidArgument(f"writes: the key {uri!r} is not a table URI (a string)")
        if not isinstance(df, DataFrame):
            raise InvalidArgument(f"writes[{uri!r}] is a {type(df).__name__}, not a Spark "
                                  "DataFrame")
        out[uri] = df
    return out


def write_many(writes: Mapping[str, DataFrame], *, txn: tuple[str, int] | None = None,
               storage_options: StorageOptions | None = None,
               ttl_ms: int = DEFAULT_TTL_MS) -> dict[str, CommitResult]:
    """Append each DataFrame of ``writes`` (table URI -> DataFrame; existing tables on
    one store) to its table, all in one multi-table transaction; the commit results
    by the URIs given (``noop`` when ``txn`` was already recorded).

    ``txn``: ``(app id, version)``, e.g. a ``foreachBatch``'s ``(query name,
    batch_id)``: exactly once into every table.  Raises TableNotFound, SchemaMismatch
    (naming the column) before any task runs, a ``CommitConflict`` (nothing
    visible) or ``CommitOutcomeUnknown`` (read back with ``caslake.snapshot``).

    Examples:
        >>> def sink(batch, batch_id):  # doctest: +SKIP
        ...     caslake.spark.write_many({orders_uri: batch.select('id', 'total'),
        ...                               items_uri: batch.select('id', 'sku')},
        ...                              txn=('ingest', batch_id))
        >>> stream.writeStream.foreachBatch(sink).start()  # doctest: +SKIP
    """
    frames = _checked(writes)
    token = check_txn(txn) if txn is not None else None
    tables = [caslake.open_table(uri, storage_options=storage_options) for uri in frames]
    tx = caslake.transaction(*tables, ttl_ms=ttl_ms, txn=token)  # meters from here
    if token is None or not all(txn_applied(t.snapshot.manifest.txns, token) for t in tables):
        try:
            for table, (uri, df) in zip(tables, frames.items(), strict=True):
                target = WriteTarget(uri, cast(StorageOptions, dict(storage_options or {})),
                                     df.schema)
                tx[table].stage("append", files=spark_written_files(df, target),
                                params={"engine": "spark"})
        except BaseException:
            tx.abort()  # removes the files staged so far
            raise
    results = tx.commit()  # by each table's store URI
    return {uri: results[t.uri.rstrip("/")] for uri, t in zip(frames, tables, strict=True)}
