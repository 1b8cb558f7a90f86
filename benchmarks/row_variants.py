"""Where torch.compile's row kernels lead ours, is it the kernel or how it is launched and timed?

Compares variants of our single-pass row kernel with Inductor's, one run, same timer, at the shapes where
kernels_grid can show Inductor ahead (small M x 4096) and two controls:

- ours: the kernel folder's single pass (N a runtime argument, every access masked), 4/8/16 warps;
- even: the same with N a constexpr equal to BLOCK_N, so no mask and constant-folded index math (what Inductor does:
  it bakes xnumel and r0_numel into its source; inductor_code shows it);
- even+hints: that plus Inductor's cache hints (x evict_first, w evict_last);
- Inductor's kernel through the compiled function, and the config its autotuner settled on;
- both timing modes: CUDA events with L2 flushed per rep, and CUDA-graph replay (10 calls per replay, no flush),
  which removes the host's launch path from what is timed (rmsnorm only: fused_add_rmsnorm updates in place).
"""
from __future__ import annotations

import gc

import triton
import triton.language as tl

from benchmarks.common import environment, need_gpu, parser, shape_list, static_compiled, write
from flytune_nb.measure.timer import GpuTimer
from flytune_nb.core.config import Config
from flytune_nb.core.device import current_device
from flytune_nb.core.registry import get_kernel

SHAPES = [(256, 4096), (1, 1024), (4096, 1024), (32768, 4096)]


@triton.jit
def rms_even(X, W, Y, stride, eps, N: tl.constexpr, HINTS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, N)
    if HINTS:
        x = tl.load(X + row * stride + cols, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(W + cols, eviction_policy="evict_last").to(tl.float32)
    else:
        x = tl.load(X + row * stride + cols).to(tl.float32)
        w = tl.load(W + cols).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(Y + row * stride + cols, (x * rstd * w).to(Y.dtype.element_ty))


@triton.jit
def add_rms_even(X, R, W, Y, stride, eps, N: tl.constexpr, HINTS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, N)
    if HINTS:
        z = tl.load(X + row * stride + cols, eviction_policy="evict_first").to(tl.float32) + \
            tl.load(R + row * stride + cols, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(W + cols, eviction_policy="evict_last").to(tl.float32)
    else:
        z = tl.load(X + row * stride + cols).to(tl.float32) + tl.load(R + row * stride + cols).to(tl.float32)
        w = tl.load(W + cols).to(tl.float32)
    z = z.to(R.dtype.element_ty)
    tl.store(R + row * stride + cols, z)
    z = z.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(z * z, axis=0) / N + eps)
    tl.store(Y + row * stride + cols, (z * rstd * w).to(Y.dtype.element_ty))


def autotuners() -> dict:
    """Inductor's live autotuners by id (a dead weak proxy among gc's objects is skipped)."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    out = {}
    for o in gc.get_objects():
        try:
            if isinstance(o, CachingAutotuner):
                out[id(o)] = o
        except ReferenceError:
            continue
    return out


def inductor_configs(before: dict) -> list[str]:
    """The configs the autotuners created since ``before`` (one shape's compile) settled on."""
    return [f"{o.fn.__name__}: {o.launchers[0].config}" for i, o in autotuners().items()
            if i not in before and getattr(o, "launchers", None)]


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--shapes", type=shape_list, default=SHAPES, metavar="M,N;...",
                    help="the shapes (default: " + ";".join(f"{m},{n}" for m, n in SHAPES) + ")")
    ap.add_argument("--name", default="row_variants", help="result file name (default: %(default)s)")
    args = ap.parse_args(argv)
    need_gpu("row_variants")
    dev = current_device()
    events = GpuTimer(dev, warmup_ms=5, rep_ms=25)
    graph = GpuTimer(dev, warmup_ms=5, rep_ms=25, graph=True, inner=10)
    shapes = args.shapes
    rows, data = [], []
    for kernel in ("rmsnorm", "fused_add_rmsnorm"):
        spec = get_kernel(kernel)
        for M, N in shapes:
            shape = {"M": M, "N": N}
            inputs = spec.make_inputs(shape, "bf16", dev)
            setup = spec.rep_setup(inputs, spec.snapshot(inputs)) or (lambda: None)
            x, w, y = inputs["x"], inputs["weight"], inputs["out"]
            r = inputs.get("residual")
            cands = {}
            for warps in (4, 8, 16):
                cfg = Config({"BLOCK_N": triton.next_power_of_2(N)}, num_warps=warps, num_stages=1)
                cands[f"ours w{warps}"] = (lambda c=cfg: spec.run(inputs, c))
                for hints in (False, True) if triton.next_power_of_2(N) == N else ():
                    tag = f"even{'+hints' if hints else ''} w{warps}"
                    if kernel == "rmsnorm":
                        cands[tag] = (lambda h=hints, nw=warps: rms_even[(M,)](x, w, y, x.stride(0), 1e-6, N=N,
                                                                             HINTS=h, num_warps=nw))
                    else:
                        cands[tag] = (lambda h=hints, nw=warps: add_rms_even[(M,)](x, r, w, y, x.stride(0), 1e-6,
                                                                                 N=N, HINTS=h, num_warps=nw))
            before = autotuners()
            compiled = static_compiled(spec.baseline)
            for _ in range(3):
                setup()
                compiled(inputs)
            cands["inductor"] = lambda: compiled(inputs)
            chosen = inductor_configs(before)
            for name, fn in cands.items():
                setup()
                fn()  # compile outside the timing
                ev = events.measure(fn, setup if kernel != "rmsnorm" else None).p50
                try:
                    gr = graph.measure(fn).p50 if kernel == "rmsnorm" else float("nan")  # in place: no replay
                except Exception as e:  # noqa: BLE001 - a function that cannot be captured is a data point
                    gr = float("nan")
                    print(name, "graph:", type(e).__name__, str(e)[:100])
                data.append({"kernel": kernel, "M": M, "N": N, "variant": name, "events_ms": ev, "graph_ms": gr})
                rows.append(f"| {kernel} | {M} | {N} | {name} | {ev * 1e3:.2f} | {gr * 1e3:.2f} |")
            data.append({"kernel": kernel, "M": M, "N": N, "inductor_configs": chosen})
            rows.append(f"| {kernel} | {M} | {N} | Inductor chose | {'; '.join(chosen)[:200]} | |")
            print("\n".join(rows[-len(cands) - 1:]), flush=True)
            del inputs
    env = environment()
    md = "\n".join([
        "# Row-kernel variants beside Inductor's", f"{env['device']}, {env['date']}, torch {env['torch']}, "
        f"triton {env['triton']}. bf16, p50 us; events: L2 flushed per rep; graph: 10 calls per replay, no flush "
        "(rmsnorm only: fused_add_rmsnorm updates its input in place).", "",
        "| kernel | M | N | variant | events | graph |", "|---|---|---|---|---|---|", *rows])
    write(args.name, {"env": env, "rows": data}, md, out=args.out)


if __name__ == "__main__":
    main()
