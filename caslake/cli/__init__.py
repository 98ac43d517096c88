"""The ``caslake`` command (``caslake.cli:console_main``; ``python -m caslake.cli``).

``main`` parses and dispatches (:mod:`caslake.cli.main`); ``dataset`` is the
``caslake dataset`` group; ``input`` reads and converts files for
``create --from``/``append``; ``output`` and ``common`` format what is printed.
"""

from caslake.cli.main import EXIT_VERIFY_FAILED, build_parser, console_main, main

__all__ = ["EXIT_VERIFY_FAILED", "build_parser", "console_main", "main"]
