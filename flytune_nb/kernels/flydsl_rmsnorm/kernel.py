"""RMSNorm in FlyDSL: y = x * rsqrt(mean(x^2) + eps) * w, one workgroup per row, the row held in registers.

A single pass over HBM: each thread loads VEC elements at a time (one 8..128-bit buffer load), squares and sums them
in fp32, the workgroup reduces the sum (xor-shuffles within each 64-lane wave, then one fp32 per wave through LDS),
and each thread scales the values it kept. The last tile of a row whose vector count is not a multiple of
BLOCK_THREADS is masked. Knobs: BLOCK_THREADS (threads per workgroup, a multiple of the wave), VEC (elements per
vector access), both Constexpr parameters of the launcher, and waves_per_eu as a compile hint (flytune_nb.kit.flydsl).
N, the dtype tag and eps are Constexpr too (the row loop is unrolled); the row count is a runtime value (only the
grid), and so is each tensor's row stride: one compile serves every M.
"""
# No `from __future__ import annotations`: FlyDSL reads the annotation objects (fx.struct fails on strings).
import functools
import math

import flydsl.compiler as flyc
import flydsl.expr as fx
import torch
from flydsl.expr import arith, const_expr, gpu, range_constexpr
from flydsl.expr import math as fmath
from flydsl.expr.typing import ReductionOp

from flytune_nb.kit import Config
from flytune_nb.kit.flydsl import launch

WAVE = 64  # CDNA (gfx942, gfx950) runs 64-lane waves
COPIES = {8: "BufferCopy8b", 16: "BufferCopy16b", 32: "BufferCopy32b", 64: "BufferCopy64b", 128: "BufferCopy128b"}
ELEMENTS = {"bf16": fx.BFloat16, "fp16": fx.Float16, "fp32": fx.Float32}
TAGS = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


@functools.lru_cache(maxsize=None)
def _reduction_slots(slots: int):
    """LDS for the cross-wave sum: one fp32 per wave (a struct type per BLOCK_THREADS, built outside the kernel)."""

    @fx.struct
    class Slots:
        s: fx.Array[fx.Float32, slots, 16]

    return Slots


def _check(N, BLOCK_THREADS, VEC):
    # Refused at trace time, before anything reaches LLVM: a non-int knob (FlyDSL does not check Constexpr types on a
    # direct call; VEC=8.0 crashes the tracer), a block that is not whole waves, a vector that would straddle rows.
    for name, v in (("N", N), ("BLOCK_THREADS", BLOCK_THREADS), ("VEC", VEC)):
        if type(v) is not int:
            raise TypeError(f"{name} must be an int, got {v!r}")
    if BLOCK_THREADS % WAVE or not WAVE <= BLOCK_THREADS <= 1024:
        raise ValueError(f"BLOCK_THREADS must be a multiple of {WAVE} in [{WAVE}, 1024], got {BLOCK_THREADS}")
    if N % VEC:
        raise ValueError(f"N={N} must be a multiple of VEC={VEC}")


@flyc.kernel(name="flytune_rmsnorm")
def rmsnorm_kernel(
    X: fx.Tensor,
    W: fx.Tensor,
    Y: fx.Tensor,
    N: fx.Constexpr[int],
    BLOCK_THREADS: fx.Constexpr[int],
    VEC: fx.Constexpr[int],
    eps: fx.Constexpr[float],
):
    # Helpers are nested: FlyDSL's rewriter turns a dynamic `if` into scf.if only inside the decorated function.
    row = fx.block_idx.x
    tid = fx.thread_idx.x
    dt = X.dtype
    fast = arith.FastMathFlags.fast
    vectors = N // VEC
    tiles = (vectors + BLOCK_THREADS - 1) // BLOCK_THREADS  # vectors per thread, unrolled
    ragged = vectors % BLOCK_THREADS != 0
    slots = max(1, BLOCK_THREADS // WAVE)
    bits = dt.width * VEC
    if bits not in COPIES:
        raise ValueError(f"VEC={VEC} x {dt.width}-bit is a {bits}-bit access; buffer copies move 8 to 128 bits")
    atom = fx.make_copy_atom(getattr(fx.rocdl, COPIES[bits])(), dt.width)
    lay = fx.make_layout(VEC, 1)
    x_row = fx.logical_divide(fx.slice(fx.rocdl.make_buffer_tensor(X), (row, None)), lay)
    y_row = fx.logical_divide(fx.slice(fx.rocdl.make_buffer_tensor(Y), (row, None)), lay)
    w_all = fx.logical_divide(fx.rocdl.make_buffer_tensor(W), lay)
    red = fx.SharedAllocator().allocate(_reduction_slots(slots)).peek().s.view(fx.make_layout(slots, 1))

    def load(view, i):
        r = fx.make_rmem_tensor(VEC, dt)
        fx.copy(atom, fx.slice(view, (None, i)), r)
        return fx.memref_load_vec(r)

    def store(value, view, i):
        r = fx.make_rmem_tensor(VEC, dt)
        fx.memref_store_vec(value, r)
        fx.copy(atom, r, fx.slice(view, (None, i)))

    def wave_sum(v):
        for k in range_constexpr(int(math.log2(WAVE))):
            v = v.addf(v.shuffle_xor(WAVE // (2 << k), WAVE), fastmath=fast)
        return v

    def block_sum(v):
        w = wave_sum(v)
        if const_expr(slots == 1):
            return w
        lane = tid % WAVE
        wave = tid // WAVE
        if lane == 0:
            fx.memref_store(w, red, wave)
        gpu.barrier()
        if wave == 0:
            live = lane < slots
            t = wave_sum(live.select(fx.memref_load(red, live.select(lane, 0)), 0.0))
            if lane == 0:
                fx.memref_store(t, red, 0)
        gpu.barrier()
        return fx.memref_load(red, 0)

    zero = fx.Float32(0.0)
    acc = zero
    kept = []
    for t in range_constexpr(tiles):  # pass 1, registers only: load, square, sum
        last = ragged and t == tiles - 1
        i = tid + t * BLOCK_THREADS
        live = i < vectors
        if const_expr(last):
            i = live.select(i, 0)  # the load stays in bounds; its value is masked out below
        v = load(x_row, i)
        f = v.to(fx.Float32)
        s = (f * f).reduce(ReductionOp.ADD, fastmath=fast)
        if const_expr(last):
            s = live.select(s, zero)
        acc = acc + s
        kept.append(v)

    rstd = fmath.rsqrt(block_sum(acc) / float(N) + eps, fastmath=fast)

    for t in range_constexpr(tiles):  # pass 2: y = x * rstd * w
        last = ragged and t == tiles - 1
        i = tid + t * BLOCK_THREADS
        live = i < vectors
        if const_expr(last):
            i = live.select(i, 0)
        y = ((kept[t].to(fx.Float32) * rstd) * load(w_all, i).to(fx.Float32)).to(dt)
        if const_expr(last):
            if live:
                store(y, y_row, i)
        else:
            store(y, y_row, i)


@flyc.jit
def rmsnorm_launch(
    x: fx.Tensor,
    weight: fx.Tensor,
    out: fx.Tensor,
    m_in: fx.Int32,
    N: fx.Constexpr[int],
    dtype: fx.Constexpr[str],
    BLOCK_THREADS: fx.Constexpr[int],
    VEC: fx.Constexpr[int],
    eps: fx.Constexpr[float] = 1e-6,
    stream: fx.Stream = fx.Stream(None),
):
    """One workgroup per row (grid m_in), BLOCK_THREADS threads. ``dtype`` ("bf16", "fp16", "fp32") names the
    element type, because FlyDSL's offline-config identity records a tensor argument's shape but never its dtype:
    a consumer keyed on ("m_in", "N", "dtype") gets one config per element type."""
    _check(N, BLOCK_THREADS, VEC)
    if ELEMENTS.get(dtype) is not x.dtype:
        raise TypeError(f"dtype={dtype!r} does not name the tensors' element type {x.dtype.__name__}")
    rmsnorm_kernel(x, weight, out, N, BLOCK_THREADS, VEC, eps).launch(
        grid=(m_in, 1, 1), block=(BLOCK_THREADS, 1, 1), stream=stream)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None, eps: float = 1e-6, *,
            config: Config) -> torch.Tensor:
    """Launch with an explicit config. ``x`` is (..., N); rows may be strided, the last dim must be contiguous."""
    N = x.shape[-1]
    if x.dtype not in TAGS or weight.dtype != x.dtype:
        raise ValueError(f"x and weight must share one of {', '.join(map(str, TAGS))}; got {x.dtype}, {weight.dtype}")
    if weight.shape != (N,):
        raise ValueError(f"weight must have shape ({N},), got {tuple(weight.shape)}")
    if N % config["VEC"]:
        raise ValueError(f"N={N} is not a multiple of VEC={config['VEC']}")
    if x.stride(-1) != 1:
        x = x.contiguous()
    if weight.stride(0) != 1:  # a broadcast (stride-0) weight: FlyDSL's layout-dynamic tensors need a unit stride
        weight = weight.contiguous()
    x2 = x if x.dim() == 2 else x.reshape(-1, N)
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    elif not out.is_contiguous():
        raise ValueError("out must be contiguous")
    y2 = out if out.dim() == 2 else out.view(-1, N)
    if x2.shape[0]:
        launch(rmsnorm_launch, (x2, weight, y2, x2.shape[0]), config, N=N, dtype=TAGS[x.dtype], eps=float(eps))
    return out
