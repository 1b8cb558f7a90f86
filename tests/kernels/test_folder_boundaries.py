"""A kernel folder uses another module only through its public names: a folder that builds on a sibling
(sglang_fused_moe_down on sglang_fused_moe) calls what the sibling documents as its entry points, so that the sibling
can change its private helpers without breaking a folder it cannot see."""
import ast
from pathlib import Path

import flytune_nb

KERNELS = Path(flytune_nb.__file__).parent / "kernels"


def _private_uses(source: str) -> list[str]:
    """``line: .name`` for each private attribute read off anything but self / cls, ``line: import name`` for each
    private name imported."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_no_kernel_folder_reaches_into_another_modules_private_names():
    found = {str(p.relative_to(KERNELS)): _private_uses(p.read_text()) for p in sorted(KERNELS.rglob("*.py"))}
    assert {p: uses for p, uses in found.items() if uses} == {}


def test_the_check_sees_private_attributes_and_imports_but_not_an_objects_own():
    source = ("from flytune_nb._compat.sglang import reset_moe_config\nfrom x import _y, z\n"
              "with base().kernel._compile_only():\n    self._jit = cls._cache = obj.__class__\n")
    assert _private_uses(source) == ["2: import _y", "3: ._compile_only"]
