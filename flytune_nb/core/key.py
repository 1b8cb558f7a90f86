"""The tuning key: everything that, if it changed, must force a re-tune.

shape, dtype, stride class per dim of every tensor input, device name + arch, a fingerprint of the kernel folder's
source, toolchain versions, the env variables that change codegen, and the timing mode. Strides collapse to
{0, 1, other} as quack does: broadcast vs contiguous vs strided changes the best kernel, 4096 vs 8192 does not.
"""
from __future__ import annotations

import ast
import hashlib
import io
import json
import os
import tokenize
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from flytune_nb._compat.triton import cache_invalidating_env
from flytune_nb.core.device import DeviceInfo

# Variables that change what Triton generates (beyond those Triton itself reports as cache-invalidating).
CODEGEN_ENV = (
    "TRITON_INTERPRET",
    "TRITON_DEFAULT_FP_FUSION",
    "TRITON_F32_DEFAULT",
    "TRITON_HIP_USE_BLOCK_PINGPONG",
    "TRITON_HIP_USE_IN_THREAD_TRANSPOSE",
    "AMDGCN_USE_BUFFER_OPS",
    "TRITON_ENABLE_FAST_MATH",
    "DISABLE_LLVM_OPT",
    "MLIR_ENABLE_REMARK",
    "NVPTX_ENABLE_DUMP",
)


def stride_class(stride: int) -> int:
    """0 broadcast, 1 contiguous, 2 anything else."""
    return stride if stride < 2 else 2


def stride_classes(inputs: Mapping[str, Any]) -> tuple:
    """Per tensor input: (name, dtype, stride class per dim). The dtype of every tensor is in, not only the main
    one: ``weight`` in fp32 beside ``x`` in bf16 is another kernel specialisation."""
    out = []
    for name in sorted(inputs):
        t = inputs[name]
        if hasattr(t, "stride") and hasattr(t, "dim"):
            out.append((name, str(t.dtype).removeprefix("torch."), tuple(stride_class(s) for s in t.stride())))
    return tuple(out)


def source_fingerprint(folder: Path | None) -> str:
    """A hash of the code under the kernel folder: every .py file's relative path and its tokens, without comments,
    docstrings, blank lines or spacing. Editing a line of code changes it (the kernel, its space, its heuristic:
    any of them can change which config is best, or what a config does); rewording a comment does not, so the trials
    and exports keyed by it stay valid. Files other than .py are data, not hashed: a folder's shape_rules.json only
    refuses shapes the kernel cannot run, before anything is compiled, and changes nothing for the shapes it admits."""
    if folder is None:
        return "none"
    return _fingerprint(str(Path(folder).resolve()), _mtimes(Path(folder)))


def current_source(spec) -> str:
    """The source fingerprint a kernel has now: the one its registry stamped at import, else its folder's hash. What
    trials, exports and cached winners record, and what they are judged stale against."""
    return spec.fingerprint or source_fingerprint(spec.source_dir)


def _mtimes(folder: Path) -> tuple:
    # The mtime signature lets the (cached) hash notice edits made while a notebook is open.
    return tuple(sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*.py")))


@lru_cache(maxsize=64)
def _fingerprint(folder: str, _sig: tuple) -> str:
    h = hashlib.sha256()
    root = Path(folder)
    for p in sorted(root.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        h.update(str(p.relative_to(root)).encode())
        h.update(b"\0")
        h.update(code_tokens(p.read_bytes()))
        h.update(b"\0")
    return h.hexdigest()[:16]


_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING}


def code_tokens(source: bytes) -> bytes:
    """The code of one Python file as a byte string of its tokens: comments, docstrings (a string that is a whole
    statement at the start of a module, class or function body) and layout left out. A file that does not tokenize
    (a syntax error) counts by its bytes: it is code a user is editing, and any change must count.

    The same on every Python: tokens by name (3.12 renumbered them: OP is 54 on 3.11, 55 on 3.12), and an f-string
    as one STRING of its source text (3.12 splits it into FSTRING_START / MIDDLE / END and the expressions' tokens).
    Otherwise exports tuned under one Python read as stale under another."""
    try:
        docstrings = _docstring_starts(ast.parse(source))
        lines = source.decode(tokenize.detect_encoding(io.BytesIO(source).readline)[0]).splitlines(keepends=True)
        out, after_docstring, fstring = [], False, None  # fstring: (start, depth) of the f-string being read
        for tok in tokenize.tokenize(io.BytesIO(source).readline):
            name = tokenize.tok_name[tok.type]
            if name == "FSTRING_START":
                fstring = (fstring[0], fstring[1] + 1) if fstring else (tok.start, 1)
                continue
            if fstring:
                if name == "FSTRING_END":
                    fstring = (fstring[0], fstring[1] - 1)
                    if fstring[1] == 0:
                        out.append(f"STRING:{_text(lines, fstring[0], tok.end)}")
                        fstring, after_docstring = None, False
                continue
            if tok.type == tokenize.STRING and tok.start in docstrings:
                after_docstring = True  # its statement's NEWLINE goes too: adding or deleting a docstring is no edit
                continue
            if tok.type in _SKIP or (after_docstring and tok.type == tokenize.NEWLINE):
                after_docstring = False
                continue
            after_docstring = False
            out.append(f"{name}:{tok.string}")
        return "\x1f".join(out).encode()
    except (SyntaxError, tokenize.TokenError, ValueError, UnicodeDecodeError):
        return source


def _text(lines: list, start: tuple, end: tuple) -> str:
    """The source between two tokenize positions ((row, col), rows from 1)."""
    (r0, c0), (r1, c1) = start, end
    if r0 == r1:
        return lines[r0 - 1][c0:c1]
    return lines[r0 - 1][c0:] + "".join(lines[r0:r1 - 1]) + lines[r1 - 1][:c1]


def _docstring_starts(tree) -> set:
    starts = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                    first.value.value, str):
                starts.add((first.lineno, first.col_offset))
    return starts


def toolchain() -> dict[str, str]:
    """Triton's toolchain part of the key (a kernel of another backend gets its backend's)."""
    import torch
    import triton

    from flytune_nb import __version__

    return {
        "flytune_nb": __version__,
        "triton": triton.__version__,
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda or ""),
        "hip": str(getattr(torch.version, "hip", None) or ""),
    }


def codegen_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in CODEGEN_ENV if k in os.environ}
    env.update(cache_invalidating_env())  # Triton's own list (TRITON_*, MLIR_*, LLVM_* that invalidate its cache)
    return dict(sorted(env.items()))


@dataclass(frozen=True)
class TuningKey:
    kernel: str
    shape: tuple  # ((axis, value), ...) in axis order
    dtype: str
    strides: tuple  # ((input name, (class per dim, ...)), ...)
    device: str
    arch: str
    source: str
    toolchain: tuple
    env: tuple
    # How configs were timed: "events" (one launch per sample, L2 flushed; the default) or "graph" (a CUDA graph of
    # several calls replayed, as an engine serves decode). They can pick different winners, so they are different
    # keys.
    timing: str = "events"

    @property
    def digest(self) -> str:
        d = asdict(self)
        if d["timing"] == DEFAULT_TIMING:  # the key before timing modes existed: every stored digest stays valid
            del d["timing"]
        blob = json.dumps(d, sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shape"] = dict(self.shape)
        d["strides"] = {name: {"dtype": dt, "classes": list(c)} for name, dt, c in self.strides}
        d["toolchain"] = dict(self.toolchain)
        d["env"] = dict(self.env)
        return d


DEFAULT_TIMING = "events"
TIMINGS = ("events", "graph")


def check_timing(mode) -> str:
    from flytune_nb.errors import UsageError

    mode = DEFAULT_TIMING if mode is None else str(mode).strip().lower()
    if mode not in TIMINGS:
        raise UsageError(f"unknown timing mode {mode!r}; choose from {', '.join(TIMINGS)}")
    return mode


def make_key(spec, shape: Mapping[str, int], dtype: str, inputs: Mapping[str, Any] | None,
             device: DeviceInfo, timing: str = DEFAULT_TIMING) -> TuningKey:
    # The toolchain part and the codegen env come from the kernel's backend (flytune_nb.backends): Triton's are
    # toolchain() and codegen_env() above, so a Triton kernel's key is the one its stored trials and exports carry.
    from flytune_nb import backends

    backend = backends.of(spec)
    return TuningKey(
        kernel=spec.name,
        shape=tuple((a, int(shape[a])) for a in spec.axes),
        dtype=dtype,
        strides=stride_classes(inputs or {}),
        device=device.name,
        arch=device.arch,
        source=current_source(spec),
        toolchain=tuple(backend.toolchain().items()),
        env=tuple(backend.codegen_env().items()),
        timing=check_timing(timing),
    )
