"""Process environment variables set for a block and put back after it: FlyDSL reads its target, its caches and its
debug output from variables at each compile, not from arguments."""
from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def environ(values: dict[str, str | None]):
    """Set each variable of ``values`` (None: unset it) for the block; every one as it was after. Process-wide: not
    for blocks running at once on several threads."""
    saved = {k: os.environ.get(k) for k in values}
    try:  # a value that cannot be set (NUL in it: ValueError) must not leave those set before it
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
