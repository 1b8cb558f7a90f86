"""Finds kernels: the built-in ``kernels/`` folder, folders named in ``FLYTUNE_KERNEL_PATH`` (os.pathsep-separated)
and folders passed as ``paths=``. Each sub-folder holding the five parts is one kernel; it is imported only when asked
for, as the package ``flytune_kernels.<name>`` so its files can import each other relatively.

A kernel can also be a module attribute: ``"package.module:SPEC"`` or ``"path/to/file.py:SPEC"`` (what
``flytune_nb.adopt`` returns, assigned at module level), accepted wherever a kernel name is, and in ``paths=`` (not in
``FLYTUNE_KERNEL_PATH``, whose separator is ``:`` on POSIX). Its module is imported after ``ensure_backend()``, and
the spec is then also known by its own name in this process, so stores and exported folders that record only the
name find it. Worker processes load it by that reference (``load_name``).
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import re
import sys
import threading
import types
from pathlib import Path
from typing import Iterable

from flytune_nb.core.resources import KERNELS
from flytune_nb.errors import KernelUnavailable, UsageError
from flytune_nb.core.device import ensure_backend
from flytune_nb.core.key import code_tokens, source_fingerprint
from flytune_nb.core.spec import KernelSpec, check_shape_rules
from flytune_nb.core.suggest import closest

BUILTIN_DIR = KERNELS  # shipped as package data
PARTS = ("__init__.py", "kernel.py", "configs.py", "heuristic.py", "reference.py")
SHAPE_RULES = "shape_rules.json"  # optional beside the parts: the shapes the kernel refuses (KernelSpec.shape_rules)
_PACKAGE = "flytune_kernels"
# A folder's module is in sys.modules while it executes: a second thread loading the same folder then would find
# it without its SPEC yet (the census runs one thread per target). One import at a time.
_IMPORT_LOCK = threading.RLock()
_MODULES = "flytune_kernel_modules"  # files named by path ("dir/file.py:SPEC") are imported under this package
# "package.module:ATTR" or "some/file.py:ATTR"
_REF = re.compile(r"^(?P<target>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*|.+\.py):(?P<attr>[A-Za-z_]\w*)$")
# Specs loaded by reference (or made by flytune_nb.adopt) in this process, by their own name.
_BY_NAME: dict[str, KernelSpec] = {}


class KernelNotFound(UsageError, LookupError):
    pass


class RegistryError(UsageError):
    pass


def is_reference(name) -> bool:
    """Whether ``name`` names a module attribute (``"package.module:SPEC"``, ``"file.py:SPEC"``), not a folder."""
    return isinstance(name, str) and _REF.match(name) is not None


def kernel_paths(paths) -> list[str]:
    """``paths=`` as a list of entries: one folder (or reference) given as text or a Path is that one entry, never
    its characters, each of which would otherwise be searched as a folder of its own. A leading ``~`` is the home
    folder: a notebook's parameter or a quoted option reaches here unexpanded by any shell."""
    if paths is None:
        return []
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    return [os.path.expanduser(os.fspath(p) if isinstance(p, os.PathLike) else str(p)) for p in paths]


def _references(paths) -> list[str]:
    return [p for p in kernel_paths(paths) if is_reference(p)]


def search_path(paths: Iterable[str | os.PathLike] | None = None) -> list[Path]:
    dirs = [Path(p) for p in kernel_paths(paths) if not is_reference(p)] + _env_dirs()
    for d in dirs:
        problem = _folder_problem(d)
        if problem:
            raise RegistryError(problem)
    return dirs + [BUILTIN_DIR]


def _env_dirs() -> list[Path]:
    return [Path(p).expanduser() for p in os.environ.get("FLYTUNE_KERNEL_PATH", "").split(os.pathsep) if p.strip()]


def _folder_problem(d: Path) -> str:
    try:
        if not d.is_dir():
            return f"kernel path {d} is not a folder (from --path / paths= or FLYTUNE_KERNEL_PATH)"
        if all((d / part).exists() for part in PARTS):  # it would list nothing: its subfolders are searched
            return (f"kernel path {d} is a kernel folder itself; give the folder that holds kernel folders: "
                    f"{d.resolve().parent}")
        os.scandir(d).close()  # discover lists it
    except OSError as e:  # EACCES: another user's folder, as a shared shell profile may name
        return f"kernel path {d} cannot be read ({e.strerror or e}) (from --path / paths= or FLYTUNE_KERNEL_PATH)"
    return ""


def drop_unusable_env_paths() -> list[str]:
    """Leave ``FLYTUNE_KERNEL_PATH``'s unusable folders out of this process's environment (and so of the workers it
    starts); returns what was wrong with them. For a notebook, whose variable comes from the shell that started
    Jupyter: the user sees why, and the built-in kernels stay usable until the variable is fixed."""
    problems, kept = [], []
    for d in _env_dirs():
        problem = _folder_problem(d)
        (problems.append(problem) if problem else kept.append(str(d)))
    if problems:
        os.environ["FLYTUNE_KERNEL_PATH"] = os.pathsep.join(kept)
    return problems


def discover(paths: Iterable[str | os.PathLike] | None = None) -> dict[str, Path]:
    """name -> folder, without importing anything. A name defined twice is an error naming both folders."""
    found: dict[str, Path] = {}
    for root in search_path(paths):
        for d in sorted(root.iterdir()):
            if not d.is_dir() or d.name.startswith((".", "_")) or not (d / "__init__.py").exists():
                continue
            if d.name in found and found[d.name].resolve() != d.resolve():
                raise RegistryError(f"kernel {d.name!r} is defined twice: {found[d.name]} and {d}; rename one folder")
            found.setdefault(d.name, d)
    return found


def list_kernels(paths=None) -> list[str]:
    """Folder kernels, and the kernels that references in ``paths`` name (those are imported to read their name)."""
    return sorted(set(discover(paths)) | {load_reference(r, paths).name for r in _references(paths)})


def get_kernel(name: str, paths=None) -> KernelSpec:
    if is_reference(name):
        return load_reference(name, paths)
    found = discover(paths)
    if name in found:
        return load_folder(found[name])
    for ref in _references(paths):
        spec = load_reference(ref, paths)
        if spec.name == name:
            return spec
    if name in _BY_NAME:
        return _BY_NAME[name]
    known = sorted(set(found) | set(_BY_NAME))
    close = closest(name, known)
    hint = f" Did you mean {close!r}?" if close else ""
    raise KernelNotFound(f"unknown kernel {name!r}.{hint} Known: {', '.join(known) or 'none'}. "
                         f"Add the folder holding a kernel folder with --path (CLI), paths= (Python) or "
                         f"FLYTUNE_KERNEL_PATH, or name a module attribute "
                         f"('package.module:SPEC' or 'file.py:SPEC').")


def loaded() -> list[KernelSpec]:
    """The specs loaded by reference or made by flytune_nb.adopt in this process (the latest of each name)."""
    return list(_BY_NAME.values())


def remember(spec: KernelSpec) -> None:
    """Make ``spec`` known by its name in this process (flytune_nb.adopt calls this for every spec it makes)."""
    _BY_NAME[spec.name] = spec


def load_reference(ref: str, paths=None) -> KernelSpec:
    """The KernelSpec at ``"package.module:ATTR"`` or ``"file.py:ATTR"``. The module is imported after
    ``ensure_backend()`` (TRITON_INTERPRET must be set before its kernels are decorated); a file is imported afresh
    when its code changed, as a folder is. The spec keeps the reference it was loaded by (``load_name``)."""
    m = _REF.match(ref)
    if m is None:
        raise RegistryError(f"{ref!r} is not a module attribute ('package.module:SPEC' or 'file.py:SPEC')")
    target, attr = m["target"], m["attr"]
    ensure_backend()
    if target.endswith(".py"):
        path = Path(target).resolve()
        if not path.is_file():
            raise RegistryError(f"{ref}: no file {path}")
        module, ref, where = _import_file(path), f"{path}:{attr}", str(path)  # its module name is ours, not theirs
    else:
        module = _import_module(target, ref)
        where = module.__name__
    kspec = getattr(module, attr, None)
    if not hasattr(module, attr):  # a typo of a name that is there, more often than a spec still to write
        specs = sorted(k for k, v in vars(module).items() if isinstance(v, KernelSpec))
        close = closest(attr, specs)
        raise RegistryError(f"{ref}: {where} has no {attr}" + (f" (did you mean {close}?)" if close else "")
                            + (f"; its KernelSpecs: {', '.join(specs)}" if specs else
                               f"; assign {attr} = flytune_nb.adopt(...) or KernelSpec(...) at module level"))
    if not isinstance(kspec, KernelSpec):
        raise RegistryError(f"{ref}: {where}'s {attr} is a {type(kspec).__name__}, not a KernelSpec (assign "
                            f"{attr} = flytune_nb.adopt(...) or KernelSpec(...) at module level)")
    folder = discover(paths).get(kspec.name)
    if folder is not None:
        raise RegistryError(f"kernel {kspec.name!r} is defined twice: {folder} and {ref}; give one another name")
    if not kspec.fingerprint:
        object.__setattr__(kspec, "fingerprint", _file_fingerprint(Path(module.__file__)))
    kspec.extra.setdefault("origin", ref)
    _BY_NAME[kspec.name] = kspec
    return kspec


def load_name(spec: KernelSpec) -> str:
    """What a worker process loads ``spec`` by: its folder kernel's name, or the module attribute it lives at (for a
    spec that was not loaded by reference, found in the module that made it, e.g. ``from my_kernels import SPEC``).
    A spec made in ``__main__`` (a notebook, a script) has no name another process can import: UsageError."""
    origin = spec.extra.get("origin")
    if origin:
        return origin
    module_name = spec.extra.get("module")
    if not module_name:
        return spec.name
    # the module that made it first; then any other the spec names (e.g. where its make_inputs lives), for a helper
    # that adopts on behalf of the module holding SPEC
    for name in dict.fromkeys((module_name, *spec.extra.get("also_modules", ()))):
        module = sys.modules.get(name) if name and name != "__main__" else None
        attr = next((k for k, v in vars(module).items() if v is spec), None) if module is not None else None
        if attr is not None:
            module_name = name
            break
    else:
        raise UsageError(f"{spec.name}: made in {module_name} where another process cannot import it; worker "
                         f"processes load kernels by name, so assign it at module level in a .py file and name it "
                         f"('my_kernels.py:SPEC'), or run in this process (isolate=False)")
    file = getattr(module, "__file__", None)
    ref = f"{Path(file).resolve()}:{attr}" if module_name.startswith(_MODULES + ".") and file else f"{module_name}:{attr}"
    spec.extra["origin"] = ref
    return ref


def _import_module(target: str, ref: str):
    try:
        return importlib.import_module(target)
    except KernelUnavailable as e:
        raise KernelUnavailable(f"{ref}: {e}") from None
    except UsageError:  # e.g. flytune_nb.adopt refusing what it was given: its message names the problem
        raise
    except ModuleNotFoundError as e:
        if e.name and (target == e.name or target.startswith(e.name + ".")):
            raise RegistryError(f"{ref}: no module {e.name!r} (is it installed, or on sys.path?)") from None
        raise RegistryError(f"{ref} failed to import: {type(e).__name__}: {e}") from e
    except Exception as e:  # a module that does not import is reported by name, not as a traceback
        raise RegistryError(f"{ref} failed to import: {type(e).__name__}: {e}") from e
    except SystemExit as e:
        raise _exited(ref, e) from None


def _exited(where, e: SystemExit) -> RegistryError:
    """A module that ended the process while imported (a script's argument parsing or sys.exit at module level):
    SystemExit is no Exception, and would end the command with the script's code and at most its usage line."""
    return RegistryError(f"{where} exited while being imported (SystemExit: {e.code}); a module flytune imports "
                         f"must only define things at import: put script code under if __name__ == '__main__':")


def _import_file(path: Path):
    fingerprint = _file_fingerprint(path)
    modname = f"{_MODULES}.{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}_{fingerprint[:8]}"
    mod = sys.modules.get(modname)
    if mod is not None:
        return mod
    if _MODULES not in sys.modules:
        pkg = types.ModuleType(_MODULES)
        pkg.__path__ = []
        sys.modules[_MODULES] = pkg
    # As for a script, its folder is importable (appended, so it never shadows an installed package): the module it
    # adopts a kernel from may sit beside it.
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    try:
        spec.loader.exec_module(mod)
    except KernelUnavailable as e:
        sys.modules.pop(modname, None)
        raise KernelUnavailable(f"{path.name}: {e}") from None
    except UsageError:
        sys.modules.pop(modname, None)
        raise
    except Exception as e:  # noqa: BLE001 - reported by name, not as a traceback
        sys.modules.pop(modname, None)
        raise RegistryError(f"{path} failed to import: {type(e).__name__}: {e}") from e
    except SystemExit as e:
        sys.modules.pop(modname, None)
        raise _exited(path, e) from None
    return mod


def _file_fingerprint(path: Path) -> str:
    return hashlib.sha256(code_tokens(path.read_bytes())).hexdigest()[:16]


def load_folder(folder: Path) -> KernelSpec:
    with _IMPORT_LOCK:
        return _load_folder(folder)


def _load_folder(folder: Path) -> KernelSpec:
    folder = Path(folder).resolve()
    missing = [p for p in PARTS if not (folder / p).exists()]
    if missing:
        raise RegistryError(f"kernel folder {folder} lacks {', '.join(missing)}; every kernel folder holds "
                            f"{', '.join(PARTS)} (see docs/kernel-plugins.md)")
    ensure_backend()  # TRITON_INTERPRET must be set before the folder's @triton.jit runs
    # One module per folder *and source version*: two folders with the same kernel name never replace each other, and
    # a folder edited on disk is imported afresh, so the fingerprint in the tuning key is always that of the code
    # that actually runs (never a new fingerprint on old, already-imported code).
    fingerprint = source_fingerprint(folder)
    modname = f"{_PACKAGE}.{folder.name}_{hashlib.sha1(str(folder).encode()).hexdigest()[:8]}_{fingerprint[:8]}"
    mod = sys.modules.get(modname)
    if mod is None:
        if _PACKAGE not in sys.modules:
            pkg = types.ModuleType(_PACKAGE)
            pkg.__path__ = []
            sys.modules[_PACKAGE] = pkg
        spec = importlib.util.spec_from_file_location(modname, folder / "__init__.py",
                                                      submodule_search_locations=[str(folder)])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        try:
            spec.loader.exec_module(mod)
        except KernelUnavailable as e:  # an optional dependency missing here: one line, not a broken plugin
            sys.modules.pop(modname, None)
            raise KernelUnavailable(f"{folder.name}: {e}") from None
        except Exception as e:  # a plugin that does not import is reported by name, not as a traceback
            sys.modules.pop(modname, None)
            raise RegistryError(f"kernel folder {folder} failed to import: {type(e).__name__}: {e}") from e
        except SystemExit as e:
            sys.modules.pop(modname, None)
            raise _exited(f"kernel folder {folder}", e) from None
    kspec = getattr(mod, "SPEC", None)
    if not isinstance(kspec, KernelSpec):
        raise RegistryError(f"{folder}/__init__.py must define SPEC = KernelSpec(...); found {type(kspec).__name__}")
    if kspec.name != folder.name:
        raise RegistryError(f"{folder}: SPEC.name is {kspec.name!r} but the folder is {folder.name!r}; make them equal")
    if kspec.source_dir is None:
        object.__setattr__(kspec, "source_dir", folder)
    if not kspec.fingerprint:
        object.__setattr__(kspec, "fingerprint", fingerprint)
    # read at every load (an edit of the file alone imports nothing afresh), over the rules the spec itself declares
    declared = kspec.__dict__.setdefault("_declared_shape_rules", dict(kspec.shape_rules))
    object.__setattr__(kspec, "shape_rules", {**_folder_shape_rules(folder, kspec), **declared})
    return kspec


def _folder_shape_rules(folder: Path, kspec: KernelSpec) -> dict[str, str]:
    """{rule: why} from the folder's shape_rules.json ({} without one). A data file, not code: the source fingerprint
    hashes the folder's .py files only, and a rule changes nothing about a shape it lets through (it only refuses,
    before anything runs, shapes the kernel cannot run), so a kernel with stored trials and exports can gain one and
    keep them."""
    path = folder / SHAPE_RULES
    if not path.is_file():
        return {}
    try:
        rules = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RegistryError(f"{path}: not readable as JSON ({type(e).__name__}: {e})") from None
    if not isinstance(rules, dict):
        raise RegistryError(f'{path}: must hold one object of rule -> reason, e.g. {{"topk <= E": "each token is '
                            f'routed to topk distinct experts"}}')
    try:
        check_shape_rules(kspec.name, rules, kspec.axes)
    except UsageError as e:
        raise RegistryError(f"{path}: {e}") from None
    return rules
