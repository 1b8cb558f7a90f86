"""On-disk cache of tuned winners: one small JSON file per tuning-key digest.

Writes are atomic (temp file + ``os.replace`` in the same folder) under a file lock, so two processes tuning the same
kernel leave one valid file, never a torn one. A corrupt or unreadable file is a miss with a warning, never an error.
"""
from __future__ import annotations

import json
import os
import re
import time
import warnings
from pathlib import Path

from filelock import FileLock

from flytune_nb.artifacts.files import atomic_write
from flytune_nb.core.config import Config, ConfigError
from flytune_nb.core.paths import file_in_the_way
from flytune_nb.errors import RunError, UsageError

# The files the cache writes in a kernel's folder: a winner, named by its tuning key's digest (TuningKey.digest), and
# the lock and staging files its write makes beside it. FLYTUNE_CACHE_DIR is taken as it is, so it may name a folder
# other tools keep theirs in (~/.cache itself): only these files are the cache's to count or delete.
ENTRY = re.compile(r"[0-9a-f]{24}\.json")
_OWN = re.compile(r"[0-9a-f]{24}\.json\.lock|\.[0-9a-f]{24}\.json\..+\.tmp")


def default_dir() -> Path:
    env = os.environ.get("FLYTUNE_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "flytune_nb"


def checked_dir() -> Path:
    """``default_dir()``, or UsageError where it, or a folder above it, is a file: such a cache holds no winners and
    takes none, so listing it as empty would hide the mistyped variable."""
    root = default_dir()
    blocking = file_in_the_way(root)
    if blocking is not None:
        env = os.environ.get("FLYTUNE_CACHE_DIR")
        raise UsageError(f"FLYTUNE_CACHE_DIR={env} is not a folder" if env else
                         f"tuning cache {root}: {blocking} is not a folder")
    return root


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


def entries(folder: Path) -> list[Path]:
    """A kernel folder's cached winners."""
    try:
        return sorted(p for p in folder.iterdir() if ENTRY.fullmatch(p.name) and p.is_file())
    except OSError:
        return []


def kernel_folders(root: Path) -> list[Path]:
    """The folders under the cache's root that hold cached winners (another tool's folders beside them are not)."""
    try:
        return sorted(d for d in Path(root).iterdir() if d.is_dir() and not d.is_symlink() and entries(d))
    except OSError:
        return []


def clear(folder: Path) -> int:
    """Delete a kernel folder's cached winners and the files their writes left beside them, then the folder where
    nothing else is in it; the number of winners deleted. Whatever else the folder holds is not the cache's and
    stays. RunError when a file cannot be deleted."""
    n = 0
    try:
        for p in sorted(folder.iterdir()):
            if ENTRY.fullmatch(p.name) or _OWN.fullmatch(p.name):
                if p.is_file():
                    p.unlink()
                    n += bool(ENTRY.fullmatch(p.name))
        if not any(folder.iterdir()):
            folder.rmdir()
    except OSError as e:
        raise RunError(f"cannot clear {folder}: {e.strerror or e} at {e.filename or folder} "
                       f"({n} cached winner{'s' if n != 1 else ''} deleted before it)") from None
    return n


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
    for f in entries(folder):
        try:
            key = json.loads(f.read_text())["key"]
            stale += key["source"] != source or {k: str(v) for k, v in key["toolchain"].items()} != tools
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # unreadable: the lookup warns about it and ignores it
    return stale
