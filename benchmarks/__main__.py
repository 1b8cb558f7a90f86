"""``python -m benchmarks``: list the benchmarks, each with the question it answers; ``python -m benchmarks NAME
[options]`` runs one (``--help`` for its options).

A benchmark is any ``benchmarks/*.py`` with a module docstring (its first line is the question) and a top-level
``main()``, found without importing it (so listing needs no GPU and no torch). ``common.py`` and modules that set
``HELPER = True`` (shared code a benchmark imports) are not benchmarks.
"""
from __future__ import annotations

import ast
import difflib
import importlib
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOT_BENCHMARKS = {"__init__", "__main__", "common"}


def _is_helper(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "HELPER" for t in node.targets):
            return isinstance(node.value, ast.Constant) and node.value.value is True
    return False


def discover(folder: Path = HERE) -> dict[str, str]:
    """{name: question} for every benchmark script in ``folder``, by name."""
    found = {}
    for path in sorted(folder.glob("*.py")):
        if path.stem in NOT_BENCHMARKS or path.stem.startswith("_"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        doc = ast.get_docstring(tree)
        has_main = any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
        if doc and has_main and not _is_helper(tree):
            found[path.stem] = doc.splitlines()[0].strip()
    return found


def listing(found: dict[str, str]) -> str:
    width = max(map(len, found), default=0)
    lines = ["usage: python -m benchmarks NAME [options]   (python -m benchmarks NAME --help: what it compares)", "",
             "benchmarks:"]
    lines += [f"  {name:<{width}}  {question}" for name, question in found.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    rc = _run(sys.argv[1:] if argv is None else list(argv))
    # `python -m benchmarks | head -3`: output shorter than stdout's buffer is written here or at exit, where a
    # reader that left can only give "Exception ignored" and status 120. The shell's status for it is 141. (The same
    # as flytune's CLI does, written again here: importing flytune_nb would import torch, which listing avoids.)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return rc or 141
    return rc


def _run(argv: list[str]) -> int:
    found = discover()
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing(found))
        return 0
    name = argv[0].removesuffix(".py")
    if name not in found:
        near = difflib.get_close_matches(name, found, n=3)
        print(f"python -m benchmarks: no benchmark named {name!r}"
              + (f"; did you mean {' or '.join(near)}?" if near else "; `python -m benchmarks` lists them"),
              file=sys.stderr)
        return 2
    from flytune_nb.errors import FlytuneError, UsageError, first_line

    module = importlib.import_module(f"benchmarks.{name}")
    saved, sys.argv = sys.argv, [f"python -m benchmarks {name}", *argv[1:]]
    try:
        rc = module.main()
    except FlytuneError as e:  # bad input or a run that could not go on: one line, no traceback
        print(f"python -m benchmarks {name}: {first_line(e)}", file=sys.stderr)
        return 2 if isinstance(e, UsageError) else 1
    finally:
        sys.argv = saved
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
