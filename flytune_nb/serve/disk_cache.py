"""On-disk cache of tuned winners: one small JSON file per tuning-key digest.

Writes are atomic (temp file + ``os.replace`` in the same folder) under a file lock, so two processes tuning the same
kernel leave one valid file, never a torn one. A corrupt or unreadable file is a miss with a warning, never an error.
"""
from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

from filelock import FileLock

from flytune_nb.artifacts.files import atomic_write
from flytune_nb.core.config import Config, ConfigError


def default_dir() -> Path:
    env = os.environ.get("FLYTUNE_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "flytune_nb"


class DiskCache:
    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root) if root is not None else default_dir()

    def path(self, kernel: str, digest: str) -> Path:
        return self.root / kernel / f"{digest}.json"

    def get(self, kernel: str, digest: str) -> Config | None:
        p = self.path(kernel, digest)
        if not p.exists():
            return None
        try:
            return Config.from_dict(json.loads(p.read_text())["config"])
        except (OSError, ValueError, KeyError, TypeError, ConfigError) as e:
            warnings.warn(f"ignoring unreadable tuning cache file {p}: {e}", RuntimeWarning, stacklevel=2)
            return None

    def put(self, kernel: str, digest: str, config: Config, meta: dict | None = None) -> Path:
        p = self.path(kernel, digest)
        p.parent.mkdir(parents=True, exist_ok=True)
        body = {"config": config.to_dict(), "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **(meta or {})}
        with FileLock(str(p) + ".lock"):
            atomic_write(p, json.dumps(body, sort_keys=True, indent=1, default=str))
        return p


def stale_entries(folder: Path) -> int:
    """How many of a kernel's cached winners (``folder``: its folder of the cache) were tuned for another source of
    it or another toolchain than this machine's: their keys can no longer match, so they are never hit again. 0 where
    the kernel does not load here (nothing to compare with)."""
    from flytune_nb import backends
    from flytune_nb.core.key import current_source
    from flytune_nb.core.registry import get_kernel

    try:
        spec = get_kernel(folder.name)
        source = current_source(spec)
        tools = {k: str(v) for k, v in backends.of(spec).toolchain().items()}
    except Exception:  # noqa: BLE001 - a kernel of another machine or folder: its entries are counted, not judged
        return 0
    stale = 0
    for f in folder.glob("*.json"):
        try:
            key = json.loads(f.read_text())["key"]
            stale += key["source"] != source or {k: str(v) for k, v in key["toolchain"].items()} != tools
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # unreadable: the lookup warns about it and ignores it
    return stale
