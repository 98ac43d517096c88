"""One module per user operation, on the commit core (:mod:`caslake.core`).

``write`` (append, overwrite), ``delete``, ``upsert`` (key handling), ``transaction``,
``schema`` (schema updates), ``refs`` (branches, tags, clone holds), ``clone``
(clone and drop), and the maintenance operations ``compact``, ``gc``, ``purge`` and
``verify``.  Each commits only through :func:`caslake.core.run_operation` (which moves
the handle's snapshot); they import :mod:`caslake.core`, never its modules.  The
maintenance modules are loaded only when used (``tests/test_import_cost.py``).
"""
