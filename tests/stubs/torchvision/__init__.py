"""A stand-in for torchvision, for the CPU tests only (tests/conftest.py puts this folder on the path when the real
one does not import). PyPI's torchvision wheels link libtorch_cuda, so with the CPU build of torch ``import
torchvision`` fails, and SGLang's fused-MoE import chain reaches ``import torchvision.transforms`` through its
vision-model configs. Nothing on the MoE path calls torchvision: every name here is a placeholder that raises when
used, so a test that did reach it would fail loudly. Any ``torchvision.<sub>`` module imports (a finder below)."""
import enum
import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0+cpu-test-stand-in"


class InterpolationMode(enum.Enum):  # read at import time by SGLang's vision utilities (BICUBIC, ...)
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def _placeholder(qualname: str):
    def unavailable(*args, **kwargs):
        raise RuntimeError(f"{qualname}: torchvision stand-in of the CPU tests")

    unavailable.__name__ = qualname.rsplit(".", 1)[-1]
    return unavailable


def _module_getattr(modname: str):
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "InterpolationMode":
            return InterpolationMode
        return _placeholder(f"{modname}.{name}")

    return __getattr__


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return types.ModuleType(spec.name)

    def exec_module(self, module):
        module.__path__ = []
        module.__getattr__ = _module_getattr(module.__name__)


sys.meta_path.insert(0, _SubmoduleFinder())
__getattr__ = _module_getattr(__name__)
