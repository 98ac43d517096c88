"""What lies on storage: pointer, manifest, key layout, schema and stats codecs.

Pure code: nothing in this package performs I/O.  Every object read from
storage is parsed by exactly one function here, which validates it and turns
any defect into :class:`caslake.errors.CorruptMetadata` naming the object.
"""

FORMAT_VERSION = 2  # 2: segment objects with statistics summaries; 1 is still read
TOMBSTONE_FORMAT_VERSION = 1  # tombstones did not change in version 2

# Counts, sizes and offsets on storage are signed 64-bit (as in Parquet); a
# larger value in a document is a defect, not a number to pass on to the OS.
MAX_INT64 = 2**63 - 1
