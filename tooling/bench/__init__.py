"""`hypermnesia bench NAME`: benchmarks that print a table (docs/PERFORMANCE.md has the figures)."""
