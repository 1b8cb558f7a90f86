"""Private Triton / torch / CPython / FlyDSL / SGLang internals, each behind a version check or a fallback (see
each module)."""


def distribution_version(name: str) -> str | None:
    """The installed distribution's version, from its metadata (no import); None when it is not installed."""
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def version_listed(version: str | None, verified: set, parts: int) -> bool:
    """Whether the first ``parts`` numbers of ``version`` are one of ``verified`` (False for no or an odd version)."""
    try:
        return tuple(int(p) for p in (version or "").split(".")[:parts]) in verified
    except ValueError:
        return False
