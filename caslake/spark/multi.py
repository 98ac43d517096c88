"""``caslake.spark.write_many``: Spark DataFrames appended (or upserted by key) to
several tables in one multi-table transaction (docs/protocol.md, "Multi-table
transactions"), exactly once with a ``foreachBatch``'s ``(app id, batch id)``.

Each DataFrame's rows are written as data files by Spark tasks (as
``df.write.format("caslake")`` does); the driver then stages every table's files
(and an upsert's key condition, its keys collected to the driver) in one
:func:`caslake.transaction` and commits it: all tables show the batch or none
does.  With ``txn=(app_id, batch_id)`` the token is recorded in every table's
version, so a batch Spark runs again (a restart after a crash between the commit
and Spark's checkpoint) is a no-op in every table: when every table already
records the token, nothing runs and nothing is written.

Not here (yet): deletes, updates and merges across tables with Spark tasks
finding the rows (``caslake.spark.delete`` / ``update`` / ``merge`` are one
table each); a multi-table part plans its deletes with the core planner on the
driver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from pyspark.sql import DataFrame

import caslake
from caslake.core import CommitResult, check_txn, noop_result, txn_applied
from caslake.errors import InvalidArgument
from caslake.ops.multi import DEFAULT_TTL_MS, Part
from caslake.ops.transaction import upsert_keys
from caslake.spark.dml import BROADCAST_KEYS_LIMIT
from caslake.spark.dml import _key_condition as key_condition
from caslake.spark.dml import _refuse_duplicate_keys as refuse_duplicate_keys
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
               keys: Mapping[str, Sequence[str] | str] | None = None,
               storage_options: StorageOptions | None = None,
               ttl_ms: int = DEFAULT_TTL_MS,
               broadcast_keys_limit: int = BROADCAST_KEYS_LIMIT) -> dict[str, CommitResult]:
    """Write each DataFrame of ``writes`` (table URI -> DataFrame; existing tables on
    one store) to its table, all in one multi-table transaction; the commit results
    by the URIs given (``noop`` when ``txn`` was already recorded).

    A table with ``keys[uri]`` (its key columns) gets an upsert, as
    ``caslake.spark.upsert``: its live rows whose key equals a key of the DataFrame
    are deleted and the DataFrame's rows appended (a key twice in the DataFrame is
    DuplicateKey; at most ``broadcast_keys_limit`` distinct keys, matched on the
    driver); every other table gets an append.

    ``txn``: ``(app id, version)``, e.g. a ``foreachBatch``'s ``(query name,
    batch_id)``: exactly once into every table.  Raises TableNotFound, SchemaMismatch
    (naming the column) before any task runs, a ``CommitConflict`` (nothing
    visible) or ``CommitOutcomeUnknown`` (read back with ``caslake.snapshot``).

    Examples:
        >>> def sink(batch, batch_id):  # doctest: +SKIP
        ...     caslake.spark.write_many({orders_uri: batch.select('id', 'total'),
        ...                               items_uri: batch.select('id', 'sku')},
        ...                              keys={orders_uri: 'id'}, txn=('ingest', batch_id))
        >>> stream.writeStream.foreachBatch(sink).start()  # doctest: +SKIP
    """
    frames = _checked(writes)
    upserts = _checked_keys(keys, frames)
    if isinstance(broadcast_keys_limit, bool) or not isinstance(broadcast_keys_limit, int) \
            or broadcast_keys_limit < 0:
        raise InvalidArgument(f"broadcast_keys_limit must be an integer >= 0, not "
                              f"{broadcast_keys_limit!r}")
    token = check_txn(txn) if txn is not None else None
    tables = [caslake.open_table(uri, storage_options=storage_options) for uri in frames]
    if token is not None and all(txn_applied(t.snapshot.manifest.txns, token) for t in tables):
        # A replay: no Spark job, no decision record, nothing written.
        return {uri: noop_result(t.context, "transaction", t.snapshot,
                                 started=t.context.meter())
                for uri, t in zip(frames, tables, strict=True)}
    tx = caslake.transaction(*tables, ttl_ms=ttl_ms, txn=token)  # meters from here
    try:
        for table, (uri, df) in zip(tables, frames.items(), strict=True):
            _stage(tx[table], table, uri, df, upserts.get(uri), storage_options,
                   broadcast_keys_limit)
    except BaseException:
        tx.abort()  # removes the files staged so far
        raise
    results = tx.commit()  # by each table's store URI
    return {uri: results[t.uri.rstrip("/")] for uri, t in zip(frames, tables, strict=True)}


def _checked_keys(keys: object, frames: Mapping[str, DataFrame]) -> dict[str, Sequence[str] | str]:
    if keys is None:
        return {}
    if not isinstance(keys, Mapping):
        raise InvalidArgument(f"keys must be a mapping of table URI -> key columns, not "
                              f"{type(keys).__name__}")
    for uri in keys:
        if uri not in frames:
            raise InvalidArgument(f"keys[{uri!r}]: {uri!r} is not a table of writes")
    return dict(keys)


def _stage(part: Part, table: caslake.Table, uri: str, df: DataFrame,
           key: Sequence[str] | str | None, storage_options: StorageOptions | None,
           limit: int) -> None:
    """Spark tasks write ``df``'s files; stage them in ``part`` as an append, or with
    ``key`` as an upsert (the distinct keys collected to the driver)."""
    target = WriteTarget(uri, cast(StorageOptions, dict(storage_options or {})), df.schema)
    if key is None:
        part.stage("append", files=spark_written_files(df, target), params={"engine": "spark"})
        return
    schema = table.schema
    names = upsert_keys(key, df.columns, schema.names)
    refuse_duplicate_keys(df, names)
    cond, key_frame = key_condition(df, names, schema, limit)
    if key_frame is not None:
        raise InvalidArgument(f"keys[{uri!r}]: the DataFrame has more than "
                              f"broadcast_keys_limit={limit} distinct keys; in a multi-table "
                              "transaction they are matched on the driver")
    part.stage("upsert", files=spark_written_files(df, target),
               conditions=[cond] if cond is not None else [],
               params={"key": ",".join(names), "engine": "spark"})
