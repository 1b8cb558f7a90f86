"""How much host Python does the matmul wrapper spend before it launches, on each load path? (no GPU)

The wrapper's own work per call (argument checks, the tile count, the TMA checks, building descriptors, scratch),
with the launch itself replaced by a no-op: the part of a call's host time that is flytune_nb's code, not Triton's
launcher or the driver (gemm_host_cost times whole calls on a GPU). Without a GPU the wrapper is shown a stand-in
H200 (sm_90, 132 SMs), so it takes the TMA paths it takes there. Same paths and configs as gemm_host_cost, bf16,
N=K=4096, M=1 and 64. Also the pieces that decide it, each alone: Triton's ``triton.cdiv`` (a ConstexprFunction in
Triton 3.6) against the plain ``kit.spaces.cdiv``, ``TensorDescriptor.from_tensor`` against
``_compat.triton.descriptor_maker``'s descriptor, and ``_tma_ok`` on three tensors. Best of 15 batches.
"""
from __future__ import annotations

import time
from types import SimpleNamespace
from unittest import mock

from benchmarks.common import env_line, environment, parser, per_m_table, write

CALLS = 2000
BATCHES = 15  # best of 15: single batches on these shared VMs vary by up to 2x
STAND_IN = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132, L2_cache_size=62914560,
                           total_memory=150_000_000_000, shared_memory_per_block=49152,
                           shared_memory_per_block_optin=232448)


def per_call_us(fn, calls: int) -> float:
    for _ in range(min(calls, 100)):
        fn()
    best = float("inf")
    for _ in range(BATCHES):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--calls", type=int, default=CALLS, help="calls per batch (default %(default)s)")
    args = ap.parse_args(argv)
    if args.calls < 10:
        ap.error("--calls must be at least 10")
    import torch
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor

    from benchmarks.gemm_host_cost import SHAPES, paths
    from flytune_nb._compat.triton import descriptor_maker
    from flytune_nb.core.device import current_device, from_properties
    from flytune_nb.kernels.matmul import kernel as km
    from flytune_nb.kit.spaces import cdiv

    here = current_device()
    dev = here if here.is_gpu else from_properties(STAND_IN, hip=False)
    torch_dev = here.torch_device if here.is_gpu else "cpu"
    rows = []
    with mock.patch.object(km, "current_device", lambda: dev), mock.patch.object(km, "launch", lambda *a, **k: None):
        for shape in SHAPES:
            M, N, K = shape["M"], shape["N"], shape["K"]
            a = torch.randn(M, K, dtype=torch.bfloat16, device=torch_dev)
            w = torch.randn(N, K, dtype=torch.bfloat16, device=torch_dev)
            out = torch.empty(M, N, dtype=torch.bfloat16, device=torch_dev)
            row = {"shape": shape}
            for name, cfg in paths(M).items():
                row[name] = per_call_us(lambda c=cfg: km.matmul(a, w, out, config=c), args.calls)
            make = descriptor_maker()
            row["triton.cdiv"] = per_call_us(lambda: triton.cdiv(M, 64), args.calls)
            row["kit.spaces.cdiv"] = per_call_us(lambda: cdiv(M, 64), args.calls)
            row["TensorDescriptor.from_tensor"] = per_call_us(lambda: TensorDescriptor.from_tensor(w, [64, 128]),
                                                              args.calls)
            row["descriptor_maker()"] = per_call_us(lambda: make(w, [64, 128]), args.calls)
            row["_tma_ok, three tensors"] = per_call_us(lambda: km._tma_ok(a, w, out), args.calls)
            rows.append(row)
            print(shape, {k: round(v, 2) for k, v in row.items() if isinstance(v, float)}, flush=True)
    env = environment()
    env["wrapper_device"] = dev.name + ("" if here.is_gpu else " (stand-in: no GPU here)")
    names = [k for k in rows[0] if k != "shape"]
    md = ["# matmul wrapper host Python per call, launch excluded", "",
          f"{env_line(env)}. The wrapper sees {env['wrapper_device']}; its launch is a no-op. Best of {BATCHES} x "
          f"{args.calls} calls; bf16, N=K=4096.", "", *per_m_table(rows, names, "path or piece", digits=2)]
    write("matmul_wrapper_host", {"env": env, "calls": args.calls, "batches": BATCHES, "rows": rows}, "\n".join(md),
          out=args.out)


if __name__ == "__main__":
    main()
