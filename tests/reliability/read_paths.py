"""Every way to read a caslake table, each compared with a plain model of one version.

Used by the read-paths state machine in ``test_model_state_machine.py``.  A version
is modelled as :class:`Expected`: its column names (in the table's order) and its
rows (tuples in that order).  Each ``check_*`` function reads through one path,
asserts equality (naming the path and the version), and counts the read in a
:class:`Counter`, so a run can prove that every path was really exercised:

* ``scan``: ``Table.scan(version=v)``;
* ``spark.load``: ONE ``spark.read.format("caslake")`` DataFrame per version reused
  across unfiltered and filtered collects and counts, in an order where a filter
  left pushed on the reused DataFrame would show (``spark.load.reused``), and a
  temp view queried with ``spark.sql`` (``spark.sql``);
* ``spark.load.where``: a DataFrame loaded with the read option ``where`` (its own
  predicate, pruning files) read twice;
* ``spark.native``: ``caslake.spark.read_native(spark, uri, version=v)``;
* ``iceberg.pyiceberg`` / ``iceberg.duckdb``: the Iceberg export, every snapshot it
  keeps read at its own caslake version (``caslake.version`` in its summary);
* ``delta.deltalake`` / ``delta.duckdb``: the Delta export;
* ``dataset.pds`` / ``dataset.spark``: a version's rows written as a Parquet dataset
  (by ``ParquetDatasetStore`` from the scan, and by ``caslake.spark.write_dataset``
  from the reused DataFrame) and read back by both.

Nested values are compared as plain Python values, whoever read them: a struct is a
``dict`` of its fields, a list a ``list``, a map a ``dict`` of its entries (pyarrow
lists a map's entries as pairs, Spark gives a ``dict`` and a struct as a ``Row``).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

Value = Any
Row = tuple[Value, ...]


@dataclass(frozen=True)
class Pred:
    """A predicate as SQL text (caslake and Spark SQL alike) and as a model function
    over a row of ``names`` (SQL three-valued logic: NULL satisfies no comparison)."""

    sql: str
    holds: Callable[[Row], bool]

    def __repr__(self) -> str:
        return repr(self.sql)


def _text(v: Value) -> str:
    """A nested value as text that equal values share (a dict's keys sorted)."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{k!r}:{_text(x)}" for k, x in sorted(v.items())) + "}"
    if isinstance(v, list | tuple):
        return "[" + ",".join(_text(x) for x in v) + "]"
    return repr(v)


def sort_key(v: Value) -> tuple[int, Any]:
    """Orders a column's values: NULL first, then scalars, then nested values (by
    :func:`_text`, so equal nested values sort alike whoever read them)."""
    if v is None:
        return (0, 0)
    if isinstance(v, dict | list | tuple):
        return (2, _text(v))
    return (1, v)


def canon(rows: Sequence[Row]) -> list[Row]:
    return sorted((tuple(r) for r in rows), key=lambda r: tuple(sort_key(v) for v in r))


def _holds_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_holds_map(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _holds_map(t.value_type)
    return False


def _plain(v: Value, t: pa.DataType) -> Value:
    """A value of Arrow type ``t`` (as ``to_pylist`` gives it) with maps as dicts."""
    if v is None:
        return None
    if pa.types.is_map(t):
        return {k: _plain(x, t.item_type) for k, x in v}
    if pa.types.is_struct(t):
        return {f.name: _plain(v[f.name], f.type) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [_plain(x, t.value_type) for x in v]
    return v


def arrow_values(col: pa.ChunkedArray | pa.Array) -> list[Value]:
    """A column's values, nested ones plain (maps as dicts)."""
    values = col.to_pylist()
    return [_plain(v, col.type) for v in values] if _holds_map(col.type) else values


def spark_value(v: Value) -> Value:
    """A value Spark collected, nested ones plain (a struct's ``Row`` as a dict)."""
    from pyspark.sql import Row as SparkRow

    if isinstance(v, SparkRow):
        return {k: spark_value(x) for k, x in v.asDict().items()}
    if isinstance(v, list):
        return [spark_value(x) for x in v]
    if isinstance(v, dict):
        return {k: spark_value(x) for k, x in v.items()}
    return v


@dataclass(frozen=True)
class Expected:
    names: tuple[str, ...]
    rows: tuple[Row, ...]  # canonical order

    def where(self, pred: Pred) -> list[Row]:
        return [r for r in self.rows if pred.holds(r)]

    @property
    def nested(self) -> bool:
        """Does a row hold a nested value (a struct, list or map that is not NULL)?"""
        return any(isinstance(v, dict | list) for r in self.rows for v in r)


def count(reads: Counter[str], path: str, exp: Expected) -> None:
    """Count a read of ``path`` that matched ``exp``; ``<path>.nested`` too when
    ``exp`` holds nested values (so a run shows every path compared them)."""
    reads[path] += 1
    if exp.nested:
        reads[f"{path}.nested"] += 1


def diff(got: Sequence[Row], want: Sequence[Row]) -> str:
    """What a failed comparison shows: the rows only one side has."""
    g, w = list(got), list(want)
    extra = [r for r in g if r not in w or g.count(r) > w.count(r)]
    missing = [r for r in w if r not in g or w.count(r) > g.count(r)]
    return (f" (got {len(g)} rows, model {len(w)}; only read: {extra[:5]}; "
            f"only model: {missing[:5]})")


def same(got: Sequence[Row], want: Sequence[Row], what: str) -> None:
    assert list(got) == list(want), what + diff(got, want)


def arrow_rows(t: pa.Table, names: Sequence[str], what: str) -> list[Row]:
    """The rows of ``t`` in ``names``' order; ``t`` must have exactly those columns."""
    assert sorted(t.column_names) == sorted(names), (
        f"{what}: columns {t.column_names}, the model has {list(names)}")
    cols = [arrow_values(t.column(n)) for n in names]
    return canon(list(zip(*cols, strict=True)) if cols else [])


# --- caslake's own scan ---------------------------------------------------------------


def check_scan(table: Any, version: int, exp: Expected, reads: Counter[str]) -> None:
    got = table.scan(version=version).to_arrow()
    assert tuple(got.column_names) == exp.names, (
        f"scan of version {version}: columns {got.column_names}, model {exp.names}")
    same(arrow_rows(got, exp.names, f"scan v{version}"), exp.rows,
         f"scan of version {version} differs from the model")
    count(reads, "scan", exp)


# --- Spark -------------------------------------------------------------------------------


def shared_spark() -> Any:
    """The process's local SparkSession (``tests.spark.helpers.local_spark``: the
    Spark tests later get this same session, one JVM)."""
    from tests.spark.helpers import local_spark

    return local_spark()


def spark_rows(rows: Sequence[Any], names: Sequence[str], df_names: Sequence[str]
               ) -> list[Row]:
    pos = [list(df_names).index(n) for n in names]
    return canon([tuple(spark_value(r[i]) for i in pos) for r in rows])


def check_spark_load(spark: Any, uri: str, version: int, exp: Expected,
                     preds: Sequence[Pred], reads: Counter[str],
                     dataset: tuple[str, str] | None = None) -> None:
    """One DataFrame for ``version``, reused: unfiltered, then each filter followed by
    an unfiltered read again (a pushed filter that sticks to the DataFrame shows),
    counts, and a temp view queried with SQL.  ``dataset`` (root, key): the reused
    DataFrame is also written with ``caslake.spark.write_dataset`` and read back."""
    what = f"Spark load of version {version}"
    df = spark.read.format("caslake").option("version", str(version)).load(uri)
    names = list(df.columns)
    assert tuple(names) == exp.names, f"{what}: columns {names}, model {exp.names}"
    same(spark_rows(df.collect(), exp.names, names), exp.rows, f"{what}: rows")
    for p in preds:
        want = canon(exp.where(p))
        same(spark_rows(df.where(p.sql).collect(), exp.names, names), want,
             f"{what}: rows where {p.sql}")
        assert df.count() == len(exp.rows), (
            f"{what}: count() of the DataFrame after it was read where {p.sql} "
            f"(a pushed filter stuck to the reused DataFrame?)")
        assert df.where(p.sql).count() == len(want), f"{what}: count() where {p.sql}"
        count(reads, "spark.load.reused", exp)
    same(spark_rows(df.collect(), exp.names, names), exp.rows,
         f"{what}: rows of the reused DataFrame, read again after filtered reads "
         f"({[p.sql for p in preds]})")
    view = f"caslake_model_{uuid.uuid4().hex[:8]}"
    df.createOrReplaceTempView(view)
    try:
        for p in preds:
            got = spark.sql(f"SELECT * FROM {view} WHERE {p.sql}").collect()
            same(spark_rows(got, exp.names, names), canon(exp.where(p)),
                 f"{what}: spark.sql over a temp view where {p.sql}")
        (n,) = spark.sql(f"SELECT count(*) FROM {view}").collect()[0]
        assert n == len(exp.rows), f"{what}: spark.sql count(*) over the temp view"
        got = spark.sql(f"SELECT * FROM {view}").collect()
        same(spark_rows(got, exp.names, names), exp.rows,
             f"{what}: spark.sql SELECT * over the temp view")
        count(reads, "spark.sql", exp)
    finally:
        spark.catalog.dropTempView(view)
    count(reads, "spark.load", exp)
    for p in preds:  # the read option 'where': the DataFrame's own predicate, pruned
        dfw = (spark.read.format("caslake").option("version", str(version))
               .option("where", p.sql).load(uri))
        want = canon(exp.where(p))
        same(spark_rows(dfw.collect(), exp.names, names), want, f"{what} with where={p.sql!r}")
        assert dfw.count() == len(want), f"{what} with where={p.sql!r}: count()"
        count(reads, "spark.load.where", exp)
    if dataset is not None:
        import caslake.spark
        from caslake.dataset import ParquetDatasetStore

        root, key = dataset
        caslake.spark.write_dataset(df, root, key, overwrite=True)
        got_t = ParquetDatasetStore(root).read_dataset(key)
        same(arrow_rows(got_t, exp.names, key), exp.rows,
             f"{what} written by caslake.spark.write_dataset and read back")
        count(reads, "dataset.spark", exp)


def check_native(spark: Any, uri: str, version: int, exp: Expected,
                 reads: Counter[str]) -> None:
    import caslake.spark

    df = caslake.spark.read_native(spark, uri, version=version)
    names = list(df.columns)
    assert tuple(names) == exp.names, f"read_native v{version}: columns {names}"
    same(spark_rows(df.collect(), exp.names, names), exp.rows,
         f"read_native of version {version} differs from the model")
    count(reads, "spark.native", exp)


# --- datasets --------------------------------------------------------------------------


def check_dataset(spark: Any | None, root: str, key: str, rows: pa.Table, exp: Expected,
                  reads: Counter[str]) -> None:
    """``rows`` (a version read by caslake) written as a dataset, read back by the
    dataset store and, with ``spark``, by ``caslake.spark.read_dataset``."""
    from caslake.dataset import ParquetDatasetStore

    pds = ParquetDatasetStore(root, max_rows_per_file=3)  # several parts
    pds.write_dataset(rows, key, overwrite=True)
    same(arrow_rows(pds.read_dataset(key), exp.names, key), exp.rows,
         f"dataset {key} read back by ParquetDatasetStore")
    count(reads, "dataset.pds", exp)
    if spark is not None:
        import caslake.spark

        df = caslake.spark.read_dataset(spark, root, key)
        same(spark_rows(df.collect(), exp.names, list(df.columns)), exp.rows,
             f"dataset {key} read back by caslake.spark.read_dataset")
        count(reads, "dataset.spark", exp)


# --- the exports -----------------------------------------------------------------------


def check_iceberg(uri: str, store: Any, model: Sequence[Expected] | Mapping[int, Expected],
                  reads: Counter[str],
                  max_snapshots: int = 3) -> int | None:
    """The Iceberg export (if any): its current snapshot and up to ``max_snapshots``
    earlier ones read by pyiceberg, the current one by DuckDB too, each equal to the
    model at its ``caslake.version``.  Returns the version the export shows."""
    from pyiceberg.table import StaticTable

    from caslake.export.iceberg import metadata_key, read_hint
    from tests.export.readers import duck

    version = read_hint(store)
    if version is None:
        return None
    metadata = f"{uri.rstrip('/')}/{metadata_key(version)}"
    t = StaticTable.from_metadata(metadata)
    current = t.current_snapshot()
    assert current is not None and current.summary is not None
    assert current.summary["caslake.version"] == str(version), current.summary
    snaps = t.metadata.snapshots[-max_snapshots:]
    con = duck(("avro", "iceberg"))
    for snap in snaps:
        assert snap.summary is not None
        v = int(str(snap.summary["caslake.version"]))
        exp = model[v]
        got = t.scan(snapshot_id=snap.snapshot_id).to_arrow()
        same(arrow_rows(got, exp.names, "pyiceberg"), exp.rows,
             f"Iceberg export of version {v} read by pyiceberg")
        count(reads, "iceberg.pyiceberg", exp)
        got = con.execute(f"SELECT * FROM iceberg_scan('{metadata}', snapshot_from_id => "
                          f"{snap.snapshot_id})").fetch_arrow_table()
        same(arrow_rows(got, exp.names, "DuckDB iceberg_scan"), exp.rows,
             f"Iceberg export of version {v} read by DuckDB iceberg_scan")
        count(reads, "iceberg.duckdb", exp)
    con.close()
    return version


def check_delta(uri: str, exp: Expected, version: int, reads: Counter[str]) -> None:
    """The Delta export, showing caslake ``version``, read by deltalake and DuckDB."""
    from deltalake import DeltaTable, QueryBuilder

    from tests.export.readers import duck

    dt = DeltaTable(uri)
    got = pa.table(QueryBuilder().register("t", dt).execute("SELECT * FROM t"))
    same(arrow_rows(got, exp.names, "deltalake"), exp.rows,
         f"Delta export of version {version} read by deltalake")
    count(reads, "delta.deltalake", exp)
    con = duck(("delta",))
    got = con.execute(f"SELECT * FROM delta_scan('{uri}')").fetch_arrow_table()
    con.close()
    same(arrow_rows(got, exp.names, "DuckDB delta_scan"), exp.rows,
         f"Delta export of version {version} read by DuckDB delta_scan")
    count(reads, "delta.duckdb", exp)


def delta_columns_diverge(table: Any) -> bool:
    """Whether the head's live data files disagree on a column's Parquet name, so that
    a Delta export (readers match columns by one physical name) must be refused with
    ExportColumnsDiverged: a field stored under two names, or a field's stored name
    holding another field (dropped or renamed) in some file.  Read from the files'
    own footers."""
    import io

    import pyarrow.parquet as pq

    snap = table.snapshot
    names_of: dict[int, set[str]] = {}
    holders: dict[str, set[int]] = {}
    for f in table.io.live_files(snap):
        schema = pq.read_schema(io.BytesIO(table.store.get(f.path).data))
        for field in schema:
            fid = int((field.metadata or {})[b"PARQUET:field_id"])
            names_of.setdefault(fid, set()).add(field.name)
            holders.setdefault(field.name, set()).add(fid)
    for field in snap.manifest.schema.fields:
        used = names_of.get(field.id, set())
        if len(used) > 1 or any(holders[n] - {field.id} for n in used):
            return True
    return False


def export_delta(table: Any, reads: Counter[str]) -> bool:
    """Export the head to Delta: True if exported; False if refused because the
    files disagree on a column's name (checked here from the files themselves)."""
    from caslake.errors import ExportColumnsDiverged

    diverge = delta_columns_diverge(table)
    try:
        table.export_delta()
    except ExportColumnsDiverged as e:
        assert diverge, f"Delta export refused, but the live files agree on every name: {e}"
        reads["delta.refused"] += 1
        return False
    assert not diverge, "Delta export made although the live files disagree on a name"
    return True


READ_PATHS = ("scan", "spark.load", "spark.load.reused", "spark.load.where", "spark.sql",
              "spark.native", "iceberg.pyiceberg", "iceberg.duckdb", "delta.deltalake",
              "delta.duckdb", "dataset.pds", "dataset.spark")
