"""The partitioning errors live in caslake.errors under the right parents (and are
still importable where they were), and ``write_spec`` gives writers the spec to pass
to ``write_data_files``: None for an unpartitioned table, the default spec otherwise
(its values checked against pyarrow's own day arithmetic)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import caslake
from caslake import errors
from caslake.ops.write import write_data_files
from tests.partition.data import SCHEMA, events


def test_errors_are_in_caslake_errors(tmp_path: Path) -> None:
    from caslake.format.partition import InvalidPartitionSpec
    from caslake.ops.partition import RowsOutsideWhere

    assert InvalidPartitionSpec is errors.InvalidPartitionSpec
    assert RowsOutsideWhere is errors.RowsOutsideWhere
    assert issubclass(errors.InvalidPartitionSpec, errors.InvalidArgument)
    assert issubclass(errors.RowsOutsideWhere, errors.InputDataError)
    with pytest.raises(errors.InvalidPartitionSpec) as bad:
        caslake.create_table(str(tmp_path / "a"), SCHEMA, partition_by=["bucket(0, user_id)"])
    assert bad.value.column == "user_id" and bad.value.item == "bucket(0, user_id)"
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["day(ts)"])
    data = events(50, seed=80, days=3)
    with pytest.raises(errors.RowsOutsideWhere) as err:
        t.overwrite(data, where="ts >= '2026-10-31'")
    outside = data.filter(pc.less(data["ts"], pa.scalar(dt.datetime(2026, 10, 31),
                                                        pa.timestamp("us"))))
    first = next(i for i, r in enumerate(data.to_pylist()) if r == outside.to_pylist()[0])
    assert err.value.rows == outside.num_rows and err.value.line == first + 1
    assert err.value.first == outside.to_pylist()[0]


def test_write_spec(tmp_path: Path) -> None:
    from caslake.format.partition import write_spec

    plain = caslake.create_table(str(tmp_path / "p"), SCHEMA)
    assert write_spec(plain.context.refresh().manifest.partitioning) is None
    t = caslake.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["day(ts)"])
    m = t.context.refresh().manifest
    spec = write_spec(m.partitioning)
    assert spec is not None and spec.spec_id == 0
    data = events(300, seed=81, days=3)
    files = write_data_files(t.store, data.to_reader(), m.schema, t.context.write_options,
                             spec=spec)
    days = pc.unique(pc.divide(data["ts"].cast(pa.int64()), 86_400_000_000)).to_pylist()
    assert sorted(f.partition.values[0] for f in files) == sorted(days)
    t.update_spec([])
    assert write_spec(t.context.refresh().manifest.partitioning) is None
