"""Table maintenance, one layer above ``table/``: verification (``verify``),
compaction (``compact``) and garbage collection (``gc``); the row-group splice
(purge) will join them.

These modules work on a table handle's :class:`~caslake.table.runner.TableContext`
(store, metadata IO, caches, commit policy, clock) and commit only through
:func:`caslake.table.runner.run_operation`; they never import the public
``Table`` (``caslake.api`` imports them) and never move a handle's snapshot
themselves.
"""
