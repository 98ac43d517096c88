"""A table property caslake reads is checked when it is set: a bad value is a
typed error naming the property, and no version is made (it used to surface only
at the next compaction or export)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import caslake
from caslake.errors import InvalidArgument


@pytest.mark.parametrize(("key", "value"), [
    ("clustering.columns", "zorder()"),
    ("clustering.columns", "shuffle(id)"),
    ("export.delta.checkpoint_interval", "0"),
    ("export.delta.checkpoint_interval", "ten"),
    ("retention.keep_last_versions", "-1"),
])
def test_a_bad_property_value_commits_nothing(tmp_path: Path, key: str, value: str) -> None:
    t = caslake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    with pytest.raises(InvalidArgument, match=key.split(".")[0]):
        t.set_properties({key: value})
    assert caslake.open_table(str(tmp_path / "t")).version == 0


def test_good_values_are_set(tmp_path: Path) -> None:
    t = caslake.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    t.set_properties({"clustering.columns": "zorder(id)",
                      "export.delta.checkpoint_interval": "5"})
    assert caslake.open_table(str(tmp_path / "t")).properties["clustering.columns"] == \
        "zorder(id)"
