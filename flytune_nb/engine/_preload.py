"""What flytune's forkserver imports once, so that every worker and pool process forked from it starts with it
(flytune_nb.engine.processes). Nothing here may initialise CUDA/HIP: a process forked after that cannot use the GPU.

- torch and Triton: 3.3 s to import on the H200 host, once instead of once per process.
- torch's meta-device machinery: the first meta tensor op imports ~800 more modules (sympy, mpmath, torch._refs,
  symbolic shapes). Every sweep runs one (memory.check_fits in the worker's describe; every pool process's inputs
  are meta tensors). Without Python bytecode caches (the H200 host writes none) that is 3.3 s of compiling Python
  source in the timing worker's describe and as much in each pool process before its first compile, 4.3-5.7 s of
  waiting for the first config (benchmarks/startup_profile.py); 0.8 s here with caches.
- triton.runtime.cache.triton_key(): Triton's own version key, which hashes Triton's compiler sources and reads all
  of libtriton (lru-cached per process). It is the bulk of the first compile in every fresh process: a pool
  process's first GEMM compile took 3.9 s against 0.17-0.19 s for the next ones (benchmarks/startup_profile.py); 0.67 s
  of a 0.78 s first compile on the CPU machines. Hashing libtriton releases the GIL, so the key is computed in a
  thread while the meta ops import (joined before the server forks anything).

TIMES: how long each part took here (seconds) and when the preload started and ended (wall clock), inherited by
every forked process, for benchmarks/cost_vs_autotune.py to say where a session's first sweep waits.
"""
import os
import threading
import time

TIMES: dict = {"wall_start": time.time()}  # torch is imported already: the flytune_nb package imports it
import torch  # noqa: E402

# Whatever asks torch.cuda.is_available() here (the interpreter decision below, anything the meta ops import) is
# answered through NVML, which initialises no CUDA; restored at the end.
_nvml = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
from flytune_nb.core.device import ensure_backend  # noqa: E402

ensure_backend()  # before Triton is imported (processes.prestart says why)
_t = time.perf_counter()
import triton  # noqa: E402,F401

TIMES["triton_s"] = time.perf_counter() - _t


def _meta_ops() -> None:
    """The ops the kernels' make_inputs run, on meta tensors: randn/empty/linspace/topk/softmax/casts/matmul."""
    m = "meta"
    x = torch.randn(8, 16, device=m, dtype=torch.bfloat16)
    (1.0 + 0.5 * torch.randn(16, device=m)).to(torch.float16)
    logits = torch.randn(8, 4, device=m) + torch.linspace(0, 2, 4, device=m)
    w, ids = torch.topk(torch.softmax(logits, dim=-1), 2, dim=-1)
    (w / w.sum(-1, keepdim=True)).float(), ids.to(torch.int32)
    torch.empty(8, 16, device=m, dtype=torch.float16).mul_(0.5)
    torch.randint(0, 4, (8,), device=m), torch.zeros(4, device=m, dtype=torch.int32), torch.ones(4, device=m)
    (x @ x.T.contiguous()).float()


def _triton_key() -> None:
    t = time.perf_counter()
    try:
        from flytune_nb._compat.triton import compute_version_key

        compute_version_key()
    except Exception:  # noqa: BLE001 - another Triton's internals: each process computes its key on first compile
        pass
    TIMES["triton_key_s"] = time.perf_counter() - t


_key = threading.Thread(target=_triton_key, name="flytune-triton-key", daemon=True)
_key.start()
_t = time.perf_counter()
try:
    _meta_ops()
except Exception:  # noqa: BLE001 - another torch: each process imports what its first meta op needs
    pass
finally:
    if _nvml is None:
        del os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"]
    else:
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = _nvml
TIMES["meta_ops_s"] = time.perf_counter() - _t
_t = time.perf_counter()
_key.join()
TIMES["key_wait_s"] = time.perf_counter() - _t
TIMES["wall_end"] = time.time()


def _exit_now() -> None:
    """The server exits when its caller is gone (its "alive" pipe closes); with torch and Triton loaded, Python's
    normal finalisation then took seconds on a loaded 2-core box, and the server's children (a hung worker, whose
    parent-death signal fires when the server is gone: flytune_nb.engine.processes.watch_parent) waited for it.
    Nothing in the server needs flushing. Registered last, so it runs first; only in the server itself (its forked
    children inherit the registration but end through os._exit)."""
    if os.getpid() == _SERVER_PID:
        os._exit(0)


_SERVER_PID = os.getpid()
import atexit  # noqa: E402

atexit.register(_exit_now)
