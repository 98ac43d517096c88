"""Correctness tests for deletes, upserts and transactions (tombstones)."""
