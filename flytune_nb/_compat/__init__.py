"""Private Triton / torch / CPython internals, each behind a version check or a fallback (see each module)."""
