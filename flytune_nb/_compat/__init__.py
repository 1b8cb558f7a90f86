"""Private Triton / torch / CPython / FlyDSL / SGLang internals, each behind a version check or a fallback (see
each module)."""
