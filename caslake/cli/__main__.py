"""``python -m caslake.cli``."""

from caslake.cli.main import console_main

console_main()
