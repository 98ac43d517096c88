"""Helpers for exercising caslake against real servers in tests, benchmarks and demos.

Nothing here is imported by the library itself.
"""
