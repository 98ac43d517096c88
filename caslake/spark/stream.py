"""Structured Streaming into a caslake table, exactly once per micro-batch.

    (df.writeStream.format("caslake")
       .option("checkpointLocation", "/chk/orders")
       .start("s3://bucket/orders"))

Tasks upload data files as in a batch write; the driver commits each
micro-batch as one version that also records the txn ``(app id, batch id)``.
When Spark replays a batch after a restart (it committed to the table but
crashed before logging the batch in its checkpoint), the commit finds the txn
already in the table, creates no version and deletes the replay's files.

A Python sink is not told Spark's query id, so the app id is option
``queryId`` (or ``txnAppId``) if given, else derived from the checkpoint
location, which identifies a query across restarts (Spark passes it to the
sink as option ``checkpointLocation``).  If the location comes from
``spark.sql.streaming.checkpointLocation`` instead, it is not passed to us:
give ``queryId``.  Output mode append adds each batch; complete replaces the
table's rows with each batch (Spark does not allow update mode for Python
sinks).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from urllib.parse import urlparse

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from caslake.core import check_txn
from caslake.errors import InvalidArgument
from caslake.format.keys import new_token
from caslake.spark.commit import abort_files, commit_files, forget_commit, stream_commit_id
from caslake.spark.write import (
    TXN_APP_ID,
    TXN_VERSION,
    WriteTarget,
    message_files,
    uploads_started,
)
from caslake.store.base import ObjectStore
from caslake.store.options import StorageOptions

QUERY_ID = "queryId"
CHECKPOINT = "checkpointLocation"


def app_id_for_checkpoint(location: str) -> str:
    """The txn app id of the query checkpointed at ``location``: stable across
    restarts on the same checkpoint, distinct for different checkpoints.  Local
    paths are made absolute (as Spark qualifies them) and ``file:`` URIs reduced
    to their path, so either spelling of one checkpoint gives one id."""
    loc = location.strip()
    if loc.startswith("file:"):
        loc = urlparse(loc).path or loc[len("file:"):]
    if "://" not in loc:
        loc = os.path.normpath(os.path.abspath(loc))
    loc = loc.rstrip("/") or "/"
    return "spark-checkpoint-" + hashlib.sha256(loc.encode()).hexdigest()[:32]


def stream_app_id(options: Mapping[str, str]) -> str:
    """The app id of a streaming write's txns (see the module docstring)."""
    if options.get(TXN_VERSION) is not None:
        raise InvalidArgument(f"option {TXN_VERSION} does not apply to streaming writes: "
                              "each micro-batch is recorded under its batch id")
    named = {k: options[k].strip() for k in (QUERY_ID, TXN_APP_ID)
             if options.get(k) is not None}
    if len(set(named.values())) > 1:
        raise InvalidArgument(f"options {QUERY_ID} and {TXN_APP_ID} differ: give one")
    if named:
        app_id = next(iter(named.values()))
        if not app_id:
            raise InvalidArgument(f"option {next(iter(named))} must not be empty")
        return app_id
    location = options.get(CHECKPOINT)
    if not location:
        raise InvalidArgument(
            f"streaming into caslake needs option {CHECKPOINT} (the exactly-once app id is "
            f"derived from it) or option {QUERY_ID} (a stable id of this query): the "
            f"checkpoint location was not passed to the sink (set on the session conf?)")
    return app_id_for_checkpoint(location)


class CaslakeStreamWriter(DataSourceStreamArrowWriter):
    """One streaming query's sink: every micro-batch is one commit tagged with the txn
    ``(app_id, batch id)``.  Spark builds a fresh writer for each commit and abort,
    so all the state a batch needs is in its commit messages.

    Examples:
        >>> (stream_df.writeStream.format('caslake')  # doctest: +SKIP
        ...     .option('checkpointLocation', '/tmp/ck').start('/data/events'))
    """

    def __init__(self, uri: str, storage_options: StorageOptions, schema: StructType,
                 overwrite: bool, app_id: str) -> None:
        self.overwrite = overwrite
        self.app_id = app_id
        self.target = WriteTarget(uri, storage_options, schema)

    def open_store(self) -> ObjectStore:
        return self.target.open_store()

    def write(self, iterator: Iterator[pa.RecordBatch]  # type: ignore[override]
              ) -> WriterCommitMessage:
        return self.target.write_task(self.open_store(), new_token(), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        schema, files = message_files(messages, self.target.table_schema)
        txn = check_txn((self.app_id, int(batchId)))
        params = {"engine": "spark", "streaming_app": self.app_id,
                  "streaming_batch": str(batchId)}
        commit_files(self.open_store(), uri=self.target.uri,
                     storage_options=self.target.storage_options, schema=schema, files=files,
                     start_version=self.target.start_version,
                     commit_id=stream_commit_id(self.app_id, batchId, (f.path for f in files)),
                     overwrite=self.overwrite, txn=txn, params=params,
                     started_at_ms=uploads_started(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _, files = message_files(messages, self.target.table_schema)
        commit_id = stream_commit_id(self.app_id, batchId, (f.path for f in files))
        if not files:
            forget_commit(commit_id)
            return
        abort_files(self.open_store(), files, commit_id=commit_id,
                    start_version=self.target.start_version,
                    txn=check_txn((self.app_id, int(batchId))))
