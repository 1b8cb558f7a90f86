"""The SGLang-format config file: its name, its text, strict reading, atomic writes, and the provenance sidecar.

A file ``<dir>/<kernel>/triton_<X_Y_Z>/<axis>=<v>,...,device_name=<Dev>,dtype=<d>.json`` holds exactly
``{"<M>": {knob: int, ...}, ...}``: SGLang's loader applies ``int()`` to every key, so nothing else may go in. What we
know about each entry (device, toolchain, source fingerprint, run, latencies) goes in ``provenance.json`` beside it.
Writes are atomic (temp file + rename) under a lock on the folder itself (no lock file is left beside SGLang's files),
and the output is sorted and formatted the same way every time, so exporting the same data twice gives byte-identical
files.
"""
from __future__ import annotations

import errno
import json
import math
import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path

from flytune_nb.core.device import NOT_IN_FILE_NAMES
from flytune_nb.core.paths import file_in_the_way
from flytune_nb.core.resources import EXPORTS
from flytune_nb.core.spec import ARTIFACT_SUFFIXES
from flytune_nb.errors import UsageError

try:  # POSIX; Windows has none (export_lock says what stands in there)
    import fcntl
except ImportError:
    fcntl = None

BUILTIN_DIR = EXPORTS  # the committed configs, shipped as package data
PROVENANCE = "provenance.json"
# What to do about a sidecar that cannot be read as a whole. A merge conflict is the likely cause (the file is committed
# and every export rewrites it), and it still holds every other file's records: moved aside, not deleted, so nothing
# in it is lost while the files beside it are exported again.
RESTORE_PROVENANCE = ("restore it from version control (or finish the merge that left it so), or, where no good "
                      "copy exists, move it aside and export the files beside it again from the stores that measured "
                      "them")
# The lock file older versions left in every exported folder (and the fallback lock's name, export_lock): users who
# `git add exports/` committed it next to SGLang's files.
LOCK = ".flytune-export.lock"


class ArtifactError(UsageError):
    pass


class ProvenanceError(ArtifactError):
    """A provenance.json that cannot be used as a whole: ``path``, what is wrong (``problem``) and what to do
    (``remedy``), apart so that `flytune check` can report the files beside it in a row and say what to do once."""

    def __init__(self, path, problem: str, remedy: str):
        super().__init__(f"{path}: {problem}; {remedy}")
        self.path, self.problem, self.remedy = Path(path), problem, remedy


def refuse_installed_copy(folder: str | Path) -> None:
    """ArtifactError when ``folder`` is the package's exports/ as pip installed it (a wheel in site-packages), not a
    checkout's committed exports/: pip replaces or removes that folder's files on upgrade or uninstall, so configs or
    provenance written there would be lost, and it is not the user's to change. A checkout (or an editable install
    of one) has the project's pyproject.toml beside the package; there, writing into exports/ is how configs are
    committed."""
    if Path(folder).resolve() != BUILTIN_DIR.resolve() or (BUILTIN_DIR.parent.parent / "pyproject.toml").is_file():
        return
    raise ArtifactError(f"not written: {folder} is the installed flytune_nb package's copy of its committed configs, "
                        f"which pip replaces or removes on upgrade or uninstall; write to a folder of yours "
                        f"(--out DIR for export, a DIR argument for check) and serve it with --dir DIR or "
                        f"FLYTUNE_CONFIG_DIR=DIR")


def _is_version_folder(path: Path) -> bool:
    """``triton_3_6_0``, ``flydsl_0_5_0``: a folder of one toolchain's files (not a kernel named ``triton_matmul``)."""
    from flytune_nb import backends

    prefixes = "|".join(re.escape(backends.get(n).CONFIG_DIR_PREFIX) for n in backends.NAMES)
    return path.is_dir() and re.fullmatch(rf"(?:{prefixes})\d+(?:_\d+)*", path.name) is not None


def _holds_version_folders(path: Path) -> bool:
    try:
        return any(_is_version_folder(p) for p in path.iterdir())
    except OSError:
        return False


def refuse_inside_layout(directory: Path) -> None:
    """ArtifactError when ``directory`` is not a config dir but a folder inside one: a kernel's own folder (it holds
    ``triton_3_6_0/`` itself) or a version folder. Read as a config dir it holds no kernel folder, and a check of it
    would pass with "nothing to check" while the configs sit right there, and an export into it would write
    ``<kernel>/<kernel>/triton_X_Y_Z/...``, which no lookup of the config dir reads."""
    directory = Path(directory)
    if not (_is_version_folder(directory) or _holds_version_folders(directory)):
        return
    kfolder = directory.resolve()  # the folder that holds the version folders
    while _is_version_folder(kfolder) or (_holds_version_folders(kfolder.parent) and kfolder != kfolder.parent):
        kfolder = kfolder.parent
    above = _config_dir_holding(kfolder)
    what = "a toolchain's version folder" if _is_version_folder(directory) else "a kernel's own folder"
    raise ArtifactError(f"{directory} is {what} inside a config dir, not a config dir (which holds "
                        f"<kernel>/triton_X_Y_Z/): give the config dir that holds it, {above}")


def _config_dir_holding(kfolder: Path) -> Path:
    """The config dir above ``kfolder``, a folder of version folders: its parent, or higher where a kernel's
    artifact_path nests its folders (sglang_fused_moe/configs/: the config dir is the one above sglang_fused_moe/)."""
    from flytune_nb.core.registry import discover, get_kernel
    from flytune_nb.errors import FlytuneError

    try:
        known = discover()
    except FlytuneError:
        return kfolder.parent
    for folder in (kfolder, *kfolder.parents):
        if folder.name not in known:
            continue
        try:
            parts = Path(get_kernel(folder.name).artifact_folder).parts
        except FlytuneError:  # a kernel this machine cannot load: the parent, as for any other folder
            continue
        if kfolder.parts[-len(parts):] == parts and len(parts) <= len(kfolder.parents):
            return kfolder.parents[len(parts) - 1]
    return kfolder.parent


def triton_dir_name(version: str) -> str:
    """``3.6.0`` -> ``triton_3_6_0`` (SGLang's rule; local suffixes such as ``+git…`` dropped)."""
    core = re.match(r"^(\d+(?:\.\d+)*)", version)
    if not core:
        raise ArtifactError(f"cannot read a Triton version from {version!r}")
    return "triton_" + core.group(1).replace(".", "_")


def device_name_problem(device_name) -> str:
    """Why ``device_name`` cannot be the ``device_name=`` part of a file name, or "". A name goes in as SGLang writes
    it (core.device.normalise_name: ``Intel(R)_Arc(TM)_A770_Graphics``, parentheses and all), so only what no file
    name can hold is refused: nothing at all, a path separator (it would point into another folder: ``../../x``) or
    NUL. normalise_name never makes such a name; one given by hand (``flytune lookup --device``) may be."""
    if not isinstance(device_name, str) or not device_name:
        return f"device name {device_name!r} is empty"
    bad = NOT_IN_FILE_NAMES.search(device_name)
    if bad:
        return (f"device name {device_name!r} is not a safe file-name part: it holds {bad.group()!r}, which no file "
                f"name can")
    return ""


def file_name(spec, shape: dict, device_name: str, dtype: str) -> str:
    """``N=4096,device_name=NVIDIA_H200,dtype=bf16.json``: the kernel's file axes (by default every non-batch axis)
    in its order, then the device, then the dtype tag unless the kernel maps it to none (SGLang's bf16 MoE files:
    ``E=8,N=14336,device_name=NVIDIA_H200.json``)."""
    problem = device_name_problem(device_name)
    if problem:
        raise ArtifactError(problem)
    tag = spec.dtype_tag(dtype)
    name = compose_name({a: shape[a] for a in spec.file_axes}, device_name, {"dtype": tag} if tag else {},
                        spec.artifact_suffix)
    # Linux and macOS file systems hold at most 255 bytes per name: past it open() fails with ENAMETOOLONG, which
    # lookup would report as an unreadable folder and export as a failed write
    if len(os.fsencode(name)) > NAME_MAX:
        # no advice to rename: export and serving take the name from the trials and torch, not from the user
        raise ArtifactError(f"the file name for device {device_name!r} would be {len(os.fsencode(name))} bytes, more "
                            f"than the {NAME_MAX} a file name can hold: no config file can be written or read for "
                            f"this device")
    return name


def compose_name(axes: dict, device_name: str, parts: dict | None = None, suffix: str = "") -> str:
    """``E=8,N=14336,device_name=NVIDIA_H200,dtype=fp8_w8a8_down.json``: the axes (``AXIS=int``, in the given order),
    the device as given, then ``KEY=value`` for each of ``parts`` in its order, the suffix and ``.json``. The one
    writer of an artifact name: ``file_name`` (any kernel's export and lookup) and artifacts.sglang.file_name (SGLang's
    MoE names, whose ``block_shape`` and ``per_channel_quant`` parts follow the dtype) both write through it. Checks
    nothing: ``file_name`` refuses what no file can be named."""
    fields = [f"{a}={int(v)}" for a, v in axes.items()] + [f"device_name={device_name}"]
    return ",".join(fields + [f"{k}={v}" for k, v in (parts or {}).items()]) + suffix + ".json"


NAME_MAX = 255

# AXIS=int parts, the device (SGLang's name for it, which may itself hold "," or "="), an optional dtype tag. The
# device holds no ",KEY=": a part after it other than the dtype (``…,device_name=X,N=4096.json``, a hand-made name)
# would otherwise be read as part of the device.
_NAME = re.compile(r"^(?P<axes>(?:[A-Za-z_][A-Za-z0-9_]*=-?\d+,)*)"
                   r"device_name=(?P<device>(?:(?!,[A-Za-z_][A-Za-z0-9_]*=).)+?)(?:,dtype=(?P<tag>[^,=]+))?$")


def parse_file_name(name: str, suffix: str = "") -> tuple[dict, str, str | None]:
    """``N=4096,device_name=NVIDIA_H200,dtype=bf16.json`` -> ({"N": 4096}, "NVIDIA_H200", "bf16"); the tag is None
    for names without one (SGLang's bf16/fp16 MoE files). ``suffix``: the kernel's ``artifact_suffix``, which its
    names carry before ".json" (``…,dtype=fp8_w8a8_down.json``: the tag is ``fp8_w8a8``)."""
    stem = name.removesuffix(".json")
    m = _NAME.match(stem.removesuffix(suffix)) if name.endswith(".json") and stem.endswith(suffix) else None
    if m is None:
        raise ArtifactError(f"{name}: not an artifact name (AXIS=v,...,device_name=D,dtype=T{suffix}.json)")
    rest = {k: int(v) for k, v in (p.split("=", 1) for p in m["axes"].split(",") if p)}
    return rest, m["device"], m["tag"]


def of_device(name: str, device_name: str) -> bool:
    """Whether the file ``name`` holds configs for ``device_name``: ``…,device_name=D.json``, ``…,device_name=D,`` then
    more parts (``dtype=``, SGLang's ``block_shape=[128, 128]``), either with a kernel's lower-case suffix
    (``_down``). A device whose name starts another's (``NVIDIA_H200`` and ``NVIDIA_H200,X``, ``CPU`` and
    ``CPU_interpreter``) claims only its own."""
    suffixes = "|".join(re.escape(s) for s in ARTIFACT_SUFFIXES)
    return re.search(rf"device_name={re.escape(device_name)}(,[^=,]+=.*)?({suffixes})\.json$", name) is not None


def kernel_dir(spec, root) -> Path:
    """The folder under a config dir that holds ``spec``'s ``triton_X_Y_Z/`` folders."""
    return Path(root) / spec.artifact_folder


def render_for(spec, table: dict[int, dict]) -> str:
    return (spec.artifact_render or render)(table)


def render(table: dict[int, dict]) -> str:
    """The file's text: batch keys in numeric order, knobs in name order, 4-space indent, trailing newline."""
    body = {str(m): {k: int(v) for k, v in sorted(table[m].items())} for m in sorted(table)}
    return json.dumps(body, indent=4) + "\n"


# Read once, at import: os.umask can only be read by setting it, and setting it per write would race with other
# threads creating files (a threaded sweep, a serving process).
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write(path: Path, text: str) -> None:
    atomic_write_all([(path, text)])


def atomic_write_all(files: list[tuple[Path, str]]) -> None:
    """Write several files as one change as far as a failure goes: every text is written in full to a temp file
    beside its target first (where a full disk or an I/O error strikes), and only then are they renamed over their
    targets. An artifact and its provenance.json therefore never end up one new and one old because the second
    write failed."""
    staged = []
    try:
        for path, text in files:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_staging_prefix(path.name), suffix=".tmp")
            staged.append((tmp, path))
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a committed or shared config must be readable
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
        raise


def _staging_prefix(name: str) -> str:
    """``.<name>.`` for a temp file beside ``name``, cut so that the temp file's name fits NAME_MAX bytes too: mkstemp
    adds 8 random characters and the ".tmp" suffix, 14 bytes with the dots, so a target name of 242 to 255 bytes
    (one file_name allows) would otherwise fail to stage with ENAMETOOLONG. Cut on a character boundary."""
    room = NAME_MAX - len("..") - 8 - len(".tmp")
    return "." + os.fsencode(name)[:room].decode("utf-8", "ignore") + "."


def check_writable(folder: Path) -> None:
    """ArtifactError unless files can be created in ``folder`` (where it does not exist yet: in the nearest folder
    above it that does, where it would be made). Export checks every folder before it writes any file."""
    blocking = file_in_the_way(folder)
    if blocking is not None:
        raise ArtifactError(f"cannot write to {folder}: {blocking} exists and is not a folder")
    here = Path(folder)
    while not os.path.isdir(here) and here != here.parent:
        here = here.parent
    if not os.access(here, os.W_OK | os.X_OK):
        where = "it" if here == Path(folder) else f"{here}, where it would be made,"
        raise ArtifactError(f"cannot write to {folder}: {where} is not writable for this user")


@contextmanager
def export_lock(folder: Path):
    """The per-folder lock every export (and `flytune check --accept-drift`) holds while it reads, merges and writes
    there, so that concurrent exports into one folder (processes or threads) take turns and none's merge is lost.

    It is an exclusive ``flock`` on the folder's own descriptor, which leaves nothing behind in the folder that SGLang
    reads and users commit; a ``.flytune-export.lock`` an older version left there is removed while it is held. A
    folder this user cannot write (or open) is one ArtifactError, before anything is done there."""
    folder = Path(folder)
    check_writable(folder)
    try:
        release = _lock_folder(folder)
    except OSError as e:
        raise ArtifactError(f"cannot lock {folder} for writing: {e.strerror or e}") from None
    try:
        yield
    finally:
        release()


# flock on a directory is refused by some filesystems: NFS emulates flock with POSIX locks, whose exclusive kind needs a
# descriptor open for writing (EBADF on a directory), or runs without a lock daemon (ENOLCK); some FUSE filesystems
# support no flock at all.
_NO_FOLDER_LOCK = {errno.EBADF, errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP,
                   getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}


def _lock_folder(folder: Path):
    """Take the folder's lock (waiting for another holder); returns what releases it. OSError when it cannot."""
    if fcntl is None:
        # Windows: filelock's lock file in the folder, which its Windows lock deletes on release
        from filelock import FileLock

        lock = FileLock(str(folder / LOCK))
        lock.acquire()
        return lock.release
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except PermissionError:  # a folder this user may write but not list (check_writable passed): lock a file in it
        return _lock_file_in(folder)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException as e:  # an interrupt while waiting too: the descriptor is not kept
        os.close(fd)
        if isinstance(e, OSError) and e.errno in _NO_FOLDER_LOCK:
            return _lock_file_in(folder)
        raise
    try:
        # Left by an older version, which locked a file in the folder. Another export of ours cannot be using it
        # (on this filesystem it locks the folder, as we do); an older version still running is not kept out by our
        # lock either way.
        (folder / LOCK).unlink(missing_ok=True)
    except OSError:
        pass  # harmless where it is: nothing reads it
    return lambda: os.close(fd)  # closing the descriptor drops the flock


def _lock_file_in(folder: Path):
    """The fallback where the folder itself cannot be locked: a lock file in it, deleted by its holder on release, so
    that it is there only while an export runs. A waiter may lock a file the holder has just deleted: it then sees that
    the name no longer leads to what it locked, and tries again on the next file."""
    path = folder / LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                break
        except FileNotFoundError:
            pass  # deleted by the holder we waited for
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)

    def release():
        try:
            os.unlink(path)  # while still held: whoever waits on it sees it gone and takes the next one
        except OSError:
            pass  # already gone: nothing is left behind either way
        finally:
            os.close(fd)
    return release


class _Pairs(list):
    """A JSON object as its (key, value) pairs in order: json.loads keeps only the last of two equal keys."""


def read_table(path: Path) -> dict[int, dict]:
    """Strict read of one artifact (export merges into it): raises ArtifactError on anything malformed."""
    try:
        pairs = json.loads(Path(path).read_text(), object_pairs_hook=_Pairs)
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(pairs, _Pairs) or not pairs:
        raise ArtifactError(f"{path}: expected a non-empty JSON object of batch size -> config")
    table, keys = {}, {}
    for k, v in pairs:
        try:
            m = int(k)
        except ValueError:
            raise ArtifactError(f"{path}: key {k!r} is not a batch size (SGLang applies int() to every key)") from None
        if m < 1:  # no call has such a batch: a hand edit, and a shape no kernel can be timed at
            raise ArtifactError(f"{path}: key {k!r} is not a batch size (a whole number >= 1)")
        if m in keys:
            # SGLang keeps the last silently, and an export merging into the file would keep one of them: which
            # config serves that batch size is for the file's author to say
            raise ArtifactError(f"{path}: keys {keys[m]!r} and {k!r} are both batch size {m}: keep one")
        keys[m] = k
        if isinstance(v, _Pairs):
            if len({knob for knob, _ in v}) < len(v):
                raise ArtifactError(f"{path}: entry {k!r} names a knob twice")
            v = dict(v)
        if not isinstance(v, dict) or not v:
            raise ArtifactError(f"{path}: entry {k!r} is not a config object")
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in v.values()):
            raise ArtifactError(f"{path}: entry {k!r} holds a non-integer knob")
        table[m] = v
    return table


def read_provenance(path: Path) -> dict:
    """The sidecar as {file name: {M: record}}; {} when absent; ArtifactError (naming the file and what to do) when
    malformed."""
    if not Path(path).exists():
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ProvenanceError(path, f"not readable JSON ({e})", RESTORE_PROVENANCE) from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ProvenanceError(path, "expected {file name: {batch size: record}}", RESTORE_PROVENANCE)
    for name, records in data.items():
        for m, record in records.items():
            why = _bad_record(m, record)
            if why:
                raise ProvenanceError(path, f"{name}, batch size {m!r}: {why}",
                                      f"restore {PROVENANCE} from version control, or delete that record (the next "
                                      f"export of that batch size writes it afresh)")
    return data


def tuned_sources(records: dict) -> set[str]:
    """The kernel sources (core.key.current_source) that one file's provenance records (batch size -> record) say
    its entries were tuned for; a record that names none is left out."""
    return {r["source"] for r in records.values() if isinstance(r, dict) and r.get("source")}


def tuned_for_another_source(records: dict, spec) -> bool:
    """Whether an entry of one file (its provenance records, batch size -> record) was tuned for another source of
    the kernel than the installed one: it is still served (its knobs are the kernel's), but its timing was taken on
    code that changed since, so it may no longer be the fastest."""
    from flytune_nb.core.key import current_source

    return bool(tuned_sources(records) - {current_source(spec)})


# The fields of a provenance record that export and `flytune check` compute with, and the JSON types each may have
# (null: unknown). A record edited by hand into another type would otherwise surface as a TypeError mid-check.
_NUMBER = (int, float)
_FIELDS = {"source": (str,), "timing": (str,), "dtype": (str,), "kernel": (str,), "toolchain": (dict,),
           "shape": (dict,), "selection": (dict,), "best_p50_ms": _NUMBER, "default_p50_ms": _NUMBER}


def _bad_record(m: str, record) -> str:
    """Why one provenance record cannot be used, or ""."""
    try:
        int(m)
    except ValueError:
        return "not a batch size (the keys are the file's batch sizes)"
    if not isinstance(record, dict):
        return f"expected a record object, got {type(record).__name__}"
    for field, types in _FIELDS.items():
        v = record.get(field)
        if v is not None and (isinstance(v, bool) or not isinstance(v, types)):
            return f"{field} is {type(v).__name__} {v!r:.40}"
    # check judges an entry by now / best_p50_ms: NaN, 0 or a negative there would make every comparison false and
    # pass any slowdown. The default's may be NaN (its timing failed: export writes none to compare with).
    best, default = record.get("best_p50_ms"), record.get("default_p50_ms")
    if best is not None and not 0 < best < math.inf:
        return f"best_p50_ms is {best!r}, not a latency (a number above 0)"
    if default is not None and default <= 0:
        return f"default_p50_ms is {default!r}, not a latency (a number above 0)"
    shape = record.get("shape") or {}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in shape.values()):
        return f"shape {shape!r:.60} holds a value that is not a whole number"
    band = (record.get("selection") or {}).get("band")
    if band is not None and (isinstance(band, bool) or not isinstance(band, _NUMBER)):
        return f"selection band is {type(band).__name__} {band!r:.40}"
    return ""
