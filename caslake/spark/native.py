"""Native fast read: a pinned caslake snapshot read by Spark's own Parquet reader.

    df = caslake.spark.read_native(spark, "/data/events", version=12, columns=["id", "ts"])

caslake plans on the driver: it pins the snapshot (latest, ``version`` or
``timestamp``), lists its live data files and turns each file's tombstones
(row positions, whole row groups, key ranges: the core
:class:`~caslake.core.read.deletion_mask.DeletionMask`) into deleted row positions.
Spark then reads the files with its vectorized Parquet reader:

* files without deletions: a plain ``spark.read.parquet(...)``, no extra cost;
* files with deletions: the same read with the hidden ``_metadata.file_path`` and
  ``_metadata.row_index`` columns, left-anti-joined with a (broadcast, when
  small) frame of the deleted ``(file_path, row_index)`` pairs;

and the two are unioned.  The result has exactly the columns, types and
nullability of ``spark.read.format("caslake")``.

Paths: Spark reports ``_metadata.file_path`` as a qualified, URL-encoded URI
(``file:/tmp/a%20b/t=1/data/...``).  The deletions frame is built with the
string Hadoop's ``Path`` gives for the table root (the same conversion Spark
makes) followed by the data file key, whose characters are never encoded.  A
clone's files of the tables it references are read where they lie: under
that table's root, by their key there (not the clone's alias key).
Spark treats every path as a glob pattern, so glob characters of the root
('[', '{', '*', '?', '\\') are escaped.  Tables on the local filesystem
read as ``file:``; ``s3://`` tables as ``s3a://``, which needs ``hadoop-aws``
(and its AWS SDK) on Spark's classpath and ``fs.s3a.*`` settings (endpoint,
credentials) in the Spark configuration: caslake's ``storage_options`` are
used for the metadata only.  ``az://`` and ``gs://`` tables need Hadoop connector
jars caslake does not bundle: :class:`NativeReadUnsupported` says so, and the
data source (``spark.read.format("caslake")``) reads them.
Anything Spark cannot read is an ``InvalidArgument`` naming the path.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
from pyroaring import BitMap
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from caslake.core import DeletionMask, Scan, Snapshot, SnapshotSubset, load_masks, resolve
from caslake.errors import (  # NativeReadUnsupported: also importable from here
    CorruptMetadata,
    InvalidArgument,
    NativeReadUnsupported,
    SchemaMismatch,
)
from caslake.format.manifest import DataFile
from caslake.format.schema import Field, type_from_str
from caslake.spark.types import spark_schema_for
from caslake.store import LocalStore, ObjectStore, S3Store
from caslake.store.options import StorageOptions
from caslake.table import Table, open_table

# Deletions up to this many rows are broadcast to every task (a hash anti-join
# with no shuffle); more are left to Spark's join planning.
BROADCAST_DELETIONS_LIMIT = 1_000_000
FILE_PATH = "_caslake_file_path"
_GLOB_SPECIAL = re.compile(r"([\\\[\]{}*?])")
ROW_INDEX = "_caslake_row_index"


def read_native(spark: SparkSession, uri: str, *, version: int | None = None,
                timestamp: dt.datetime | str | int | None = None,
                columns: Sequence[str] | None = None,
                storage_options: StorageOptions | None = None) -> DataFrame:
    """Read one version of a caslake table with Spark's own Parquet reader.

    ``version`` or ``timestamp`` (a datetime, ISO-8601 text or epoch
    milliseconds) pick the version (default: the latest, pinned now);
    ``columns`` narrows and orders the columns (a dotted path projects a nested
    field, as the data source's option ``columns``).  Equal to
    ``spark.read.format("caslake")`` with the same options, without filter
    pushdown into caslake (Spark's own Parquet filter pushdown applies).

    Examples:
        >>> df = caslake.spark.read_native(spark, '/data/events', version=3)  # doctest: +SKIP
    """
    table = open_table(uri, storage_options=storage_options)
    scan = table.scan(columns=list(columns) if columns is not None else None,
                      version=version, as_of=timestamp)  # pins the snapshot; checks columns
    snap = scan.snapshot
    arrow = snap.manifest.schema.to_arrow()
    names = list(scan.columns)
    result = spark_schema_for(scan.schema)  # nested fields projected by dotted columns
    for name in names:
        refuse_unreadable(snap.manifest.schema.field(name))
    files = [f for f in table.io.live_files(snap) if f.row_count > 0]
    if not files:
        return spark.createDataFrame([], result)
    located = file_locations(spark, table.store, files)
    deleted = deleted_positions(table, snap, files)
    clean = [f for f in files if f.path not in deleted]
    dirty = [f for f in files if f.path in deleted and len(deleted[f.path]) < f.row_count]
    # Spark's reader matches columns by Parquet field id once the table's schema has
    # evolved (renamed, dropped, re-added columns), never by name (format.md,
    # "Reading by field id"); a field a file lacks reads as NULL.
    by_id = snap.manifest.schema.schema_id > 0
    if by_id:
        spark.conf.set("spark.sql.parquet.fieldId.read.enabled", "true")
    fields = {f.name: f for f in snap.manifest.schema.fields}
    reader = spark.read.schema(StructType([
        _read_field(sf, fields[sf.name], by_id) for sf in result.fields]))

    def paths(fs: list[DataFile]) -> list[str]:
        return [located[f.path][0] for f in fs]

    parts: list[DataFrame] = []
    if clean:
        parts.append(reader.parquet(*paths(clean)).select(*map(_col, names)))
    if dirty:
        if "_metadata" in arrow.names:
            raise InvalidArgument(f"read_native cannot drop deleted rows of {uri}: its column "
                                  "'_metadata' hides Spark's file metadata column; use "
                                  "spark.read.format('caslake')")
        rows = reader.parquet(*paths(dirty)).select(
            *map(_col, names), F.col("_metadata.file_path").alias(FILE_PATH),
            F.col("_metadata.row_index").alias(ROW_INDEX))
        frame = _deletions_frame(spark, {located[f.path][1]: deleted[f.path] for f in dirty})
        if sum(len(b) for b in deleted.values()) <= BROADCAST_DELETIONS_LIMIT:
            frame = F.broadcast(frame)
        parts.append(rows.join(frame, on=[FILE_PATH, ROW_INDEX], how="left_anti")
                     .select(*map(_col, names)))
    if not parts:  # every file wholly deleted (never written so, but cheap to allow)
        return spark.createDataFrame([], result)
    df = parts[0] if len(parts) == 1 else parts[0].union(parts[1])
    if by_id:  # the field ids the reader was asked with stay out of the result's schema
        df = df.select(*[_col(f.name).cast(_read_type(f.dataType, fields[f.name], False))
                         .alias(f.name) for f in result.fields])
    return _with_nullability(df, result, uri)


def refuse_unreadable(field: Field) -> None:
    """SchemaMismatch naming the field's path if Spark's Parquet reader cannot read
    it as the data source shows it (nanosecond timestamps; uuid, float16 and time,
    which the data source converts; decimals with a negative scale)."""
    for path, f in field.walk():
        if f.nested:
            continue
        t = type_from_str(f.type)
        why = None
        if pa.types.is_timestamp(t) and t.unit == "ns":
            why = "cannot read nanosecond timestamps"
        elif t == pa.uuid() or t == pa.float16() or pa.types.is_time(t):
            why = f"cannot read Parquet's {f.type} values"
        elif pa.types.is_decimal(t) and t.scale < 0:
            why = "cannot read decimals with a negative scale"
        if why is not None:
            raise SchemaMismatch(
                f"column {path!r} is {f.type}: Spark's Parquet reader {why}; leave "
                f"{field.name!r} out (columns=...) or read with spark.read.format('caslake')",
                column=path, actual=f.type)


def _read_field(sf: StructField, field: Field, by_id: bool) -> StructField:
    """The field as Spark's Parquet reader is asked for it: nullable at every level
    (Spark reads files so), with the Parquet field id of every struct field when the
    schema has evolved."""
    meta = {"parquet.field.id": field.id} if by_id else None
    return StructField(sf.name, _read_type(sf.dataType, field, by_id), True, meta)


def _read_type(t: DataType, field: Field, by_id: bool) -> DataType:
    if isinstance(t, StructType):
        by_name = {c.name: c for c in field.children}
        return StructType([_read_field(sf, by_name[sf.name], by_id) for sf in t.fields])
    if isinstance(t, ArrayType):
        return ArrayType(_read_type(t.elementType, field.children[0], by_id), True)
    if isinstance(t, MapType):
        key, value = field.children
        return MapType(_read_type(t.keyType, key, by_id), _read_type(t.valueType, value, by_id),
                       True)
    return t


def _col(name: str) -> Column:
    return F.col("`" + name.replace("`", "``") + "`")


def _with_nullability(df: DataFrame, schema: StructType, uri: str) -> DataFrame:
    """Spark reads every Parquet column and nested field as nullable; give NOT NULL
    columns and nested fields (struct fields, array elements, map values) back their
    nullability, as the data source reports it.  A NULL in one is an error, never
    replaced: ``coalesce(CASE WHEN c IS NULL THEN raise_error(..) ELSE c END, v)`` is
    NOT NULL for Spark, and ``v`` (any non-null value of the type) is never used."""
    if all(f.nullable and _nullable_inside(f.dataType) for f in schema.fields):
        return df
    cols = [_exact(_col(f.name), f.dataType, f.nullable, f.name, uri).alias(f.name)
            for f in schema.fields]
    return df.select(*cols)


def _nullable_inside(t: DataType) -> bool:
    """Whether every node inside ``t`` is nullable (as Spark reads Parquet)."""
    if isinstance(t, StructType):
        return all(f.nullable and _nullable_inside(f.dataType) for f in t.fields)
    if isinstance(t, ArrayType):
        return t.containsNull and _nullable_inside(t.elementType)
    if isinstance(t, MapType):
        return t.valueContainsNull and _nullable_inside(t.keyType) \
            and _nullable_inside(t.valueType)
    return True


def _exact(c: Column, t: DataType, nullable: bool, path: str, uri: str) -> Column:
    """``c`` (as Spark read it) with the nullability of ``t`` inside and, unless
    ``nullable``, NOT NULL itself."""
    if not _nullable_inside(t):
        c = _exact_inside(c, t, path, uri)
    if nullable:
        return c
    failing = F.raise_error(F.lit(f"caslake table {uri}: column {path!r} is NOT NULL but a "
                                  "data file holds a NULL"))
    return F.coalesce(F.when(c.isNull(), failing).otherwise(c), _some_value(t))


def _exact_inside(c: Column, t: DataType, path: str, uri: str) -> Column:
    if isinstance(t, StructType):
        fields = [_exact(c.getField(f.name), f.dataType, f.nullable, f"{path}.{f.name}", uri)
                  .alias(f.name) for f in t.fields]
        return F.when(c.isNull(), F.lit(None)).otherwise(F.struct(*fields))
    if isinstance(t, ArrayType):
        element = t.elementType
        return F.transform(c, lambda x: _exact(x, element, t.containsNull,
                                               f"{path}.element", uri))
    if isinstance(t, MapType):
        value = t.valueType
        return F.transform_values(c, lambda _, v: _exact(v, value, t.valueContainsNull,
                                                         f"{path}.value", uri))
    return c


def _some_value(t: DataType) -> Column:
    """A non-null literal of Spark type ``t`` (one that Spark knows is not null)."""
    if isinstance(t, DecimalType):  # 0 with t's scale: the cast can never overflow
        return F.lit(decimal.Decimal(0).scaleb(-t.scale)).cast(t)
    if isinstance(t, StringType):
        return F.lit("")
    if isinstance(t, BinaryType):
        return F.lit(bytearray())
    if isinstance(t, BooleanType):
        return F.lit(False)
    if isinstance(t, DateType):
        return F.lit(dt.date(1970, 1, 1))
    if isinstance(t, TimestampType | TimestampNTZType):
        return F.lit(dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).cast(t)
    if isinstance(t, ArrayType):
        return F.array().cast(t)
    if isinstance(t, MapType):
        return F.create_map().cast(t)
    if isinstance(t, StructType):
        return F.struct(*[_some_value(f.dataType).alias(f.name) for f in t.fields])
    return F.lit(0).cast(t)  # the integer and floating point types


def file_locations(spark: SparkSession, store: ObjectStore, files: Sequence[DataFile]
                   ) -> dict[str, tuple[str, str]]:
    """For each file: the path to hand Spark (glob characters escaped: Spark globs
    every path) and the path Spark reports in ``_metadata.file_path``.  A clone's
    file of another table is named where it lies, under that table's root
    (:func:`caslake.core.routing.resolve`)."""
    roots: dict[str, tuple[str, str]] = {}
    out: dict[str, tuple[str, str]] = {}
    for f in files:
        owner, key = resolve(store, f.path)
        if owner.uri not in roots:
            read_root, reported_root = spark_paths(spark, owner)
            roots[owner.uri] = (_GLOB_SPECIAL.sub(r"\\\1", read_root), reported_root)
        read_root, reported_root = roots[owner.uri]
        out[f.path] = (f"{read_root}/{key}", f"{reported_root}/{key}")
    return out


#: Stores whose files Spark's own reader reaches only through a Hadoop connector jar.
_CONNECTORS = {"az": "hadoop-azure connector (abfss://)",
               "gs": "Cloud Storage connector (gcs-connector, gs://)"}


def spark_paths(spark: SparkSession, store: ObjectStore) -> tuple[str, str]:
    """For the table root: the path to hand Spark, and the prefix Spark reports in
    ``_metadata.file_path`` for the files under it."""
    if isinstance(store, LocalStore):
        read_root, scheme = "file:" + str(store.root.absolute()), "file"
    elif isinstance(store, S3Store):
        read_root = f"s3a://{store.bucket}" + (f"/{store.prefix}" if store.prefix else "")
        scheme = "s3a"
    elif store.uri.startswith(tuple(_CONNECTORS)):
        scheme = store.uri.split(":", 1)[0]
        raise NativeReadUnsupported(
            f"read_native cannot read {store.uri}: Spark's Parquet reader needs the "
            f"{_CONNECTORS[scheme]} on its classpath, which caslake does not bundle; "
            "use spark.read.format('caslake') (the Python data source) instead")
    else:
        raise InvalidArgument(f"read_native cannot read {store.uri}: Spark's Parquet reader "
                              "reads local and s3a:// paths; use spark.read.format('caslake')")
    read_root = read_root.rstrip("/")
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        raise InvalidArgument("read_native needs a classic SparkSession (with a JVM); use "
                              "spark.read.format('caslake') on Spark Connect")
    conf = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    try:
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, conf)
        path = jvm.org.apache.hadoop.fs.Path(read_root)
        reported = str(path.getFileSystem(conf).makeQualified(path).toUri().toString())
    except Exception as e:  # py4j's Py4JJavaError: no FileSystem for the scheme
        hint = (" (s3a:// needs hadoop-aws and its AWS SDK on Spark's classpath, e.g. "
                "spark.jars.packages=org.apache.hadoop:hadoop-aws:<Spark's Hadoop version>, "
                "and fs.s3a.* settings)") if scheme == "s3a" else ""
        java = getattr(e, "java_exception", None)  # py4j: the JVM's exception, one line
        detail = str(java.toString()) if java is not None else (
            (str(e).strip().splitlines() or [type(e).__name__])[0])
        raise InvalidArgument(f"Spark cannot read {read_root}{hint}: {detail[:300]}; "
                              "use spark.read.format('caslake') instead") from None
    return read_root, reported.rstrip("/")


def deleted_positions(table: Table, snap: Snapshot, files: Sequence[DataFile]
                      ) -> dict[str, BitMap]:
    """Deleted row positions of each file of ``snap`` that has deletions, from the
    core's merged deletion masks (key ranges need the file's key column values,
    read through caslake's scan)."""
    manifest = snap.manifest
    masks = load_masks(table.store, table.tombstones, manifest.tombstones,
                       {f.path: f for f in table.io.live_files(snap)},
                       [f.path for f in files], manifest.schema)
    by_path = {f.path: f for f in files}

    def positions(item: tuple[str, DeletionMask]) -> tuple[str, BitMap]:
        path, mask = item
        f = by_path[path]
        if not mask.row_groups and not mask.key_ranges:
            return path, mask.deleted_positions([])
        group_rows = table.footers.get(table.store, f).group_rows
        keys = _key_values(table, snap, f, sorted(mask.key_columns())) if mask.key_ranges \
            else None
        return path, mask.deleted_positions(group_rows, keys)

    items = [(p, m) for p, m in masks.items() if p in by_path]
    if len(items) <= 1:
        found = [positions(i) for i in items]
    else:
        with ThreadPoolExecutor(max_workers=min(16, len(items))) as pool:
            found = list(pool.map(positions, items))
    return {p: bm for p, bm in found if bm}


def _key_values(table: Table, snap: Snapshot, f: DataFile, columns: list[str]) -> pa.Table:
    """Every row's values of ``columns`` in file ``f``, in file order (no deletions
    applied), read by caslake's scan of the one-file subset of the snapshot, given
    no tombstones."""
    view = SnapshotSubset(snap.version, snap.key, snap.manifest.schema, (f,))
    values = Scan(table.io, table.footers, view, columns, None).to_arrow()
    if values.num_rows != f.row_count:
        raise CorruptMetadata(f.path, f"read {values.num_rows} rows; the manifest says "
                              f"{f.row_count}")
    return values


def _deletions_frame(spark: SparkSession, deleted: dict[str, BitMap]) -> DataFrame:
    """(file path as Spark reports it, row index) for every deleted row."""
    names = list(deleted)
    counts = [len(deleted[p]) for p in names]
    index = np.repeat(np.arange(len(names), dtype=np.int32), counts)
    rows = np.concatenate([np.asarray(deleted[p].to_array(), dtype=np.int64) for p in names])
    paths = pa.DictionaryArray.from_arrays(index, pa.array(names, pa.string()))
    table = pa.table({FILE_PATH: paths.cast(pa.string()), ROW_INDEX: pa.array(rows)})
    return spark.createDataFrame(table)
