"""What lies on storage: pointer, manifest, key layout, schema and stats codecs.

Pure code: nothing in this package performs I/O.  Every object read from
storage is parsed by exactly one function here, which validates it and turns
any defect into :class:`caslake.errors.CorruptMetadata` naming the object.
"""

# The highest format version this code reads.  Writers write the lowest version
# that can express a table: BASE_FORMAT_VERSION until the table uses a feature of
# a later version (refs, holds: 2; segment objects: 3; nested and newer types: 4;
# partition specs: 5;
# docs/format.md, "Format version rule"), and they never rewrite an object with a
# lower version than they found.
FORMAT_VERSION = 5
BASE_FORMAT_VERSION = 1
SEGMENTS_FORMAT_VERSION = 3  # segment objects with statistics summaries
TYPES_FORMAT_VERSION = 4  # nested fields with ids at every level, newer primitive types
PARTITION_FORMAT_VERSION = 5  # partition specs and per-file partition values

# Counts, sizes and offsets on storage are signed 64-bit (as in Parquet); a
# larger value in a document is a defect, not a number to pass on to the OS.
MAX_INT64 = 2**63 - 1
