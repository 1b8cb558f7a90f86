"""CPython internals flytune_nb reads, each with a fallback."""
from __future__ import annotations

import os


def environ_bytes() -> dict | None:
    """The bytes-keyed dict behind ``os.environ`` on POSIX, or None. ``os.environ.get`` encodes the name on every call
    (~0.5 us a key); the serving path reads ~11 variables per call, so it reads this dict (~0.05 us a key)."""
    data = getattr(os.environ, "_data", None)
    return data if isinstance(data, dict) and os.name == "posix" else None


def pool_broken(pool) -> bool:
    """Whether a ``ProcessPoolExecutor`` is broken (a worker died): ``submit`` would raise BrokenProcessPool. Reads
    the executor's ``_broken`` flag; a Python without it answers False and the submit's exception says so instead."""
    return bool(getattr(pool, "_broken", False))
