"""The table: commit loop, append, scan planning and execution, history."""
