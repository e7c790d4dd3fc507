"""`hypermnesia eval`: retrieval quality on public data through the real service path."""
