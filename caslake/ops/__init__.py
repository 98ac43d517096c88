"""One module per user operation, on the commit core (:mod:`caslake.core`).

``write`` (append, overwrite), ``delete``, ``upsert`` (key handling), ``update``
(UPDATE, and the assignments and type rule MERGE shares), ``merge`` (conditional
MERGE), ``transaction`` (and the commit of an update's or merge's rewrite),
``schema`` (schema updates), ``refs`` (branches, tags, clone holds), ``clone``
(clone and drop), ``change_feed`` (the rows each version changed, and following
a table as versions land), ``restore`` (a new version equal to an older one),
and the maintenance operations ``compact``, ``gc``, ``purge`` and
``verify``.  Each commits only through :func:`caslake.core.run_operation` (which moves
the handle's snapshot); they import :mod:`caslake.core`, never its modules.  The
maintenance modules, update, merge, the change feed and restore are loaded only when used
(``tests/test_import_cost.py``).
"""
