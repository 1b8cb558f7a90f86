"""How much host time does one matmul call take on each load path, and how much of it is building TMA descriptors?

Against torch.matmul (cuBLAS), host time only: each path's calls are enqueued behind a GPU sleep long enough to
cover them, so no call waits for the GPU and the time per call is what the CPU spends (what an eager serving loop
without CUDA graphs pays before the GPU sees the kernel; under a graph replay none of it is paid). Same shape and bf16 for every path: M=1 and M=64
(decode) with N=K=4096. Paths, each an explicit config run through the kernel's wrapper (``spec.run``, what a tuned
call launches):
- pointer (TMA=0), and pointer split-K 2 (its arrival counters and partials come from flytune_nb.kit.scratch);
- TMA, one tile per program (TMA=1): three descriptors built per call;
- persistent TMA (TMA=2): three descriptors, a grid of at most the SM count;
- swapped-operand TMA (TMA=1, SWAP_AB=1): two descriptors, the decode rule's tile;
- the swapped kernel launched with descriptors built once (``launch`` directly): what caching them would save;
- ``TensorDescriptor.from_tensor`` alone, per descriptor.
The best of 5 batches of 200 calls is kept for each.
"""
from __future__ import annotations

import time

import torch

from benchmarks.common import environment, need_gpu, parser, per_m_table, write
from flytune_nb.core.config import Config
from flytune_nb.core.device import current_device
from flytune_nb.core.registry import get_kernel

CALLS = 200
BATCHES = 5
SHAPES = ({"M": 1, "N": 4096, "K": 4096}, {"M": 64, "N": 4096, "K": 4096})


def _config(bm, bn, bk, stages, **knobs) -> Config:
    return Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 1, **knobs},
                  num_warps=4, num_stages=stages)


def paths(m: int) -> dict:
    bm = max(16, 1 << (m - 1).bit_length())  # the swapped tile's row block: next power of two, at least 16
    return {
        "pointer": _config(16 if m <= 16 else 64, 64, 128, 4),
        "pointer, split-K 2": _config(16 if m <= 16 else 64, 64, 128, 4, SPLIT_K=2),
        "TMA, a tile a program": _config(64, 64, 128, 4, TMA=1),
        "persistent TMA": _config(64, 128, 64, 4, TMA=2),
        "swapped-operand TMA": _config(bm, 64, 256 if m <= 32 else 128, 4, TMA=1, SWAP_AB=1),
    }


def host_us(fn) -> float:
    """Host microseconds a call, with the GPU kept busy by a sleep queued first (so no call waits for it)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(BATCHES):
        torch.cuda._sleep(int(2e8))  # ~0.1 s at ~2 GHz: longer than 200 calls at 500 us each
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        best = min(best, (time.perf_counter() - t0) / CALLS)
        torch.cuda.synchronize()
    return best * 1e6


def _prebuilt_swap(kmod, inputs: dict, cfg: Config):
    """The swapped kernel's launch with its two descriptors and scratch made once, as a cache would hand them."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    from flytune_nb.kit.launcher import launch

    a, w = inputs["a"], inputs["w"]
    M, K = a.shape
    N = w.shape[0]
    bm, bn, bk = cfg["BLOCK_SIZE_M"], cfg["BLOCK_SIZE_N"], cfg["BLOCK_SIZE_K"]
    out = torch.empty(M, N, dtype=a.dtype, device=a.device)
    tiles = -(-M // bm) * -(-N // bn)
    ws, locks = kmod._split_scratch(a, out, tiles, 1, bm, bn)
    args = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]), out, ws, locks,
            M, N, K, out.stride(0), out.stride(1))

    def call():
        launch(kmod.matmul_swap_ab_kernel, (tiles,), args, cfg, BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk,
               SPLIT_K=1, UPCAST=False)
    return call, out


def main(argv=None):
    args = parser(__doc__, __file__).parse_args(argv)
    need_gpu("gemm_host_cost")
    from importlib import import_module

    from triton.tools.tensor_descriptor import TensorDescriptor

    dev = current_device()
    spec = get_kernel("matmul")
    kmod = import_module(spec.run.__module__ + ".kernel")
    rows = []
    for shape in SHAPES:
        inputs = spec.make_inputs(shape, "bf16", dev)
        a, w = inputs["a"], inputs["w"]
        ref = (a.double() @ w.double().T)
        row = {"shape": shape, "torch.matmul (cuBLAS)": host_us(lambda: a @ w.T)}
        for name, cfg in paths(shape["M"]).items():
            out = spec.run(inputs, cfg)
            err = ((out.double() - ref).norm() / ref.norm()).item()
            row[name] = host_us(lambda c=cfg: spec.run(inputs, c))
            row[f"{name} rel_error"] = err
        swap_cfg = paths(shape["M"])["swapped-operand TMA"]
        call, out = _prebuilt_swap(kmod, inputs, swap_cfg)
        call()
        row["swapped, descriptors built once rel_error"] = ((out.double() - ref).norm() / ref.norm()).item()
        row["swapped, descriptors built once"] = host_us(call)
        bm, bk = swap_cfg["BLOCK_SIZE_M"], swap_cfg["BLOCK_SIZE_K"]
        t0 = time.perf_counter()
        for _ in range(10_000):
            TensorDescriptor.from_tensor(a, [bm, bk])
        row["TensorDescriptor.from_tensor"] = (time.perf_counter() - t0) / 10_000 * 1e6
        rows.append(row)
        print(shape, {k: round(v, 2) for k, v in row.items() if isinstance(v, float)}, flush=True)
    env = environment()
    names = ["torch.matmul (cuBLAS)", *paths(1), "swapped, descriptors built once", "TensorDescriptor.from_tensor"]
    md = ["# matmul host time per call, by load path", "",
          f"{env['device']}, {env['date']}, torch {env['torch']}, triton {env['triton']}, commit {env.get('commit')}. "
          f"Host time only (calls queued behind a GPU sleep), best of {BATCHES} x {CALLS} calls; bf16, N=K=4096.", "",
          *per_m_table(rows, names)]
    worst = max(v for r in rows for k, v in r.items() if k.endswith("rel_error"))
    md += ["", f"Every path's output against the fp64 product: relative error at most {worst:.2e}."]
    write("gemm_host_cost", {"env": env, "calls": CALLS, "batches": BATCHES, "rows": rows}, "\n".join(md),
          out=args.out)


if __name__ == "__main__":
    main()
