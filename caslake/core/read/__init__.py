"""The read path: scan planning and execution (``scan``), deletion masks
(``deletion_mask``) and Arrow export (``interop``).  Imported through :mod:`caslake.core`."""
