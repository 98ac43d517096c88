"""What lies on storage: pointer, manifest, key layout, schema and stats codecs.

Pure code: nothing in this package performs I/O.  Every object read from
storage is parsed by exactly one function here, which validates it and turns
any defect into :class:`caslake.errors.CorruptMetadata` naming the object.
"""

FORMAT_VERSION = 1
