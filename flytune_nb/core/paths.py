"""What stands in the way of making a folder: the question every "cannot make / write there" message answers."""
from __future__ import annotations

import os
from pathlib import Path


def file_in_the_way(path: str | os.PathLike) -> Path | None:
    """The first of ``path`` and the folders above it, from the root down, that exists and is not a folder, or None.
    mkdir there fails with only "File exists" or "Not a directory", which names neither the path nor the file."""
    path = Path(path)
    return next((p for p in [*reversed(path.parents), path] if os.path.lexists(p) and not p.is_dir()), None)


def beside(db: str | os.PathLike, suffix: str) -> str:
    """``runs/x.db`` -> ``runs/x<suffix>`` (``.results.csv``, ``.trials.csv``), in the store's folder: a sweep's
    outputs stay with its store instead of landing in whatever folder papermill or Jupyter was started from."""
    db = Path(db)
    return str(db.with_name(db.stem + suffix))
