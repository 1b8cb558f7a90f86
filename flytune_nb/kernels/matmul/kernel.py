"""GEMM in Triton: out = a @ w.T, a (M, K) activations, w (N, K) a linear layer's weight, fp32 accumulation.

One program per (BLOCK_SIZE_M x BLOCK_SIZE_N) output tile, tiles visited in groups of GROUP_SIZE_M rows so that
consecutive programs share w's column panel in L2 (GROUP_SIZE_M=1 is plain row-major order). Rows of a and w past
M / N are wrapped (``% M``) rather than masked, so the inner loop's loads stay unmasked; only the store is masked.
EVEN_K drops the K mask when BLOCK_SIZE_K divides K, the common case for model dimensions.

TMA (a knob, absent = 0) picks the load path on Hopper: 1 loads the same tiles through host-side TMA descriptors, 2 does
that in a persistent kernel (one program per SM). On the H200, bf16, K=4096
(benchmarks/results/NVIDIA_H200/gemm_paths.md) TMA=2 with 128x256x64 tiles on 8 warps ran at 0.97-0.98x cuBLAS for
M=4096 against 0.77-0.79x for the best pointer config of the same list: the pointer loop's address arithmetic and
cp.async waits cost more than the MMA's issue slots can hide; TMA issues each tile as one bulk copy.

UPCAST is for Triton's CPU interpreter only: it runs tl.dot through numpy, which has no bfloat16, and a bf16 dot
there returns garbage (max error 2.6e10 on a 16x16 product, Triton 3.6). On a GPU it is always False, so the compiled
kernel is the plain bf16 MMA.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from flytune_nb.config import Config
from flytune_nb.device import current_device
from flytune_nb.launch import launch
from flytune_nb.spaces import has_tma


@triton.jit
def matmul_kernel(A, W, C, M, N, K, stride_am, stride_ak, stride_wn, stride_wk, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr, EVEN_K: tl.constexpr, UPCAST: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    in_group = GROUP_SIZE_M * num_pid_n
    first_m = (pid // in_group) * GROUP_SIZE_M
    group_m = min(num_pid_m - first_m, GROUP_SIZE_M)
    # int64 from here: row * stride overflows int32 once M*N or M*K passes 2^31 (an LM head, N=152k, at M=16k).
    pid_m = (first_m + (pid % in_group) % group_m).to(tl.int64)
    pid_n = ((pid % in_group) // group_m).to(tl.int64)

    offs_m = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_n = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = A + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    w_ptrs = W + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn  # a (K, N) view of w
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            w = tl.load(w_ptrs)
        else:
            k_left = K - k * BLOCK_SIZE_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            w = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(a, w, acc)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        w_ptrs += BLOCK_SIZE_K * stride_wk

    rows = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    cols = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = C + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def matmul_tma_kernel(a_desc, w_desc, c_desc, M, N, K, programs,
                      BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                      GROUP_SIZE_M: tl.constexpr, PERSISTENT: tl.constexpr, UPCAST: tl.constexpr):
    """The same tiles through Hopper's tensor memory accelerator: each K step is two bulk copies into shared memory
    (edges zero-filled, the store clipped by the hardware), so no thread computes an address or a mask. PERSISTENT:
    ``programs`` programs (one per SM) walk the tiles in steps of ``programs``: no tail wave, and the next tile's
    loads overlap this tile's epilogue. ``programs`` is a runtime argument, so a new M never compiles a new kernel.
    Otherwise one program per tile."""
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    in_group = GROUP_SIZE_M * num_pid_n
    if PERSISTENT:
        start, stop, step = tl.program_id(0), num_pid_m * num_pid_n, programs
    else:
        start, stop, step = tl.program_id(0), tl.program_id(0) + 1, 1
    for tile in tl.range(start, stop, step, flatten=PERSISTENT):
        first_m = (tile // in_group) * GROUP_SIZE_M
        group_m = min(num_pid_m - first_m, GROUP_SIZE_M)
        off_m = (first_m + (tile % in_group) % group_m) * BLOCK_SIZE_M
        off_n = ((tile % in_group) // group_m) * BLOCK_SIZE_N
        acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k in range(k_tiles):
            a = a_desc.load([off_m, k * BLOCK_SIZE_K])
            w = w_desc.load([off_n, k * BLOCK_SIZE_K])
            if UPCAST:
                a = a.to(tl.float32)
                w = w.to(tl.float32)
            acc = tl.dot(a, w.T, acc)
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def _tma_ok(*ts: torch.Tensor) -> bool:
    """A TMA descriptor needs a non-empty tensor, a 16-byte-aligned base, 16-byte-aligned row strides and a
    contiguous last dim."""
    return all(t.numel() > 0 and t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and
               (t.stride(0) * t.element_size()) % 16 == 0 for t in ts)


def matmul(a: torch.Tensor, w: torch.Tensor, out: torch.Tensor | None = None, *, config: Config) -> torch.Tensor:
    """``a @ w.T`` with an explicit config. ``a`` is (..., K), ``w`` is (N, K); any strides."""
    K = a.shape[-1]
    if w.dim() != 2 or w.shape[1] != K:
        raise ValueError(f"w must have shape (N, {K}), got {tuple(w.shape)}")
    if a.dtype != w.dtype:
        raise ValueError(f"a and w must have the same dtype, got {a.dtype} and {w.dtype}")
    a2 = a if a.dim() == 2 else a.reshape(-1, K)  # reshape/view cost ~1 us each a call, even when nothing changes
    M, N = a2.shape[0], w.shape[0]
    if out is None:
        out = torch.empty(*a.shape[:-1], N, dtype=a.dtype, device=a.device)
    elif out.shape != (*a.shape[:-1], N):
        raise ValueError(f"out must have shape {(*a.shape[:-1], N)}, got {tuple(out.shape)}")
    c2 = out if out.dim() == 2 else out.view(-1, N)
    bm, bn, bk = config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"], config["BLOCK_SIZE_K"]
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    dev = current_device()
    upcast = dev.backend == "interpreter" and a.dtype == torch.bfloat16
    tma = config.get("TMA", 0)
    # TMA on Hopper and newer (and the interpreter, which emulates it for the tests); elsewhere, or when a tensor is
    # not 16-byte aligned, the same tiles take the pointer path: same result, only the load path differs
    if tma and (dev.backend == "interpreter" or has_tma(dev)) and _tma_ok(a2, w, c2):
        from triton.tools.tensor_descriptor import TensorDescriptor

        programs = min(grid[0], dev.sm_count) if tma == 2 else grid[0]
        launch(matmul_tma_kernel, (programs,),
               (TensorDescriptor.from_tensor(a2, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]),
                TensorDescriptor.from_tensor(c2, [bm, bn]), M, N, K, programs), config,
               BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=config["GROUP_SIZE_M"],
               PERSISTENT=tma == 2, UPCAST=upcast)
        return out
    backend = dev.backend
    launch(matmul_kernel, grid, (a2, w, c2, M, N, K, a2.stride(0), a2.stride(1), w.stride(0), w.stride(1),
                                 c2.stride(0), c2.stride(1)), config,
           BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=config["GROUP_SIZE_M"], EVEN_K=K % bk == 0,
           UPCAST=backend == "interpreter" and a.dtype == torch.bfloat16)
    return out
