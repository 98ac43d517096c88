"""Table maintenance: verification (and, later, gc, compaction and purge)."""
