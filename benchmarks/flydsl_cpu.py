"""What do the FlyDSL kernels cost without an AMD GPU: listing them, importing FlyDSL, compiling every config? (no GPU)

Measures, on the host alone (FlyDSL kernels never launch here): `flytune kernels` in a fresh process, which must not
import FlyDSL, against `import torch` and `import torch, flydsl.compiler, flydsl.expr`; then every config of both
FlyDSL kernels at M=4096 N=4096 bf16 compiled for gfx942 and gfx950 (compile_report: FlyDSL's caches bypassed), with
the VGPRs, LDS and distinct code objects they compile to. Needs flydsl and ld.lld >= 22. Filed under this machine's
device name (CPU_interpreter without a GPU).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, environment, env_line, parser, write

KERNELS = ("flydsl_rmsnorm", "flydsl_fused_add_rmsnorm")


def wall(code: str, repeat: int) -> tuple[float, str]:
    """Median wall time of a fresh interpreter running ``code``, and its last output line."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    times, last = [], ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        times.append(time.perf_counter() - t0)
        last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    return statistics.median(times), last


def main(argv=None):
    ap = parser(__doc__, __file__)
    ap.add_argument("--repeat", type=int, default=5, help="fresh processes per import/listing timing (default 5)")
    ap.add_argument("--skip-compile", action="store_true", help="only the listing and import timings")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    from flytune_nb.backends import flydsl

    flydsl.require()
    listed = ("import sys, io, contextlib; from flytune_nb.ui.cli import main\n"
              "with contextlib.redirect_stdout(io.StringIO()): main(['kernels'])\n"
              "print(any(m == 'flydsl' or m.startswith('flydsl.') for m in sys.modules))")
    rows = {"python startup": wall("pass", args.repeat),
            "import torch": wall("import torch", args.repeat),
            "import torch, flydsl.compiler, flydsl.expr": wall("import torch, flydsl.compiler, flydsl.expr",
                                                               args.repeat),
            "flytune kernels (all kernels, FlyDSL's listed)": wall(listed, args.repeat)}
    imported = rows["flytune kernels (all kernels, FlyDSL's listed)"][1]
    env = environment()
    payload = {"env": env, "flydsl": flydsl.version(), "load_1min": os.getloadavg()[0],
               "wall_s": {k: round(v[0], 3) for k, v in rows.items()}, "listing_imported_flydsl": imported == "True"}
    md = ["# FlyDSL kernels on a machine without an AMD GPU", "", env_line(env) + f", flydsl {flydsl.version()}", "",
          f"{env['cpu_count']} cores, 1-min load {os.getloadavg()[0]:.1f} at start; median of {args.repeat} fresh "
          f"processes", "",
          "| what | wall |", "|---|---|"]
    md += [f"| {k} | {v[0]:.2f} s |" for k, v in rows.items()]
    md += ["", f"`flytune kernels` imported FlyDSL: {imported}"]

    if not args.skip_compile:
        from flytune_nb.core.device import interpreter_device
        from flytune_nb.core.registry import get_kernel

        os.environ["ROCM_PATH"] = str(flydsl.linker_root(Path(tempfile.mkdtemp()) / "rocm"))
        compiles = []
        for name in KERNELS:
            spec = get_kernel(name)
            shape = spec.example()
            for arch in flydsl.ARCHS:
                for config in spec.configs(shape, "bf16", interpreter_device()):
                    r = flydsl.compile_report(spec, shape, "bf16", config, arch)
                    k = r.kernels[0] if r.kernels else None
                    compiles.append({"kernel": name, "arch": arch, "config": str(config), "s": round(r.seconds, 3),
                                     "ok": r.ok, "problems": list(r.problems), "vgpr": k and k.vgpr,
                                     "sgpr": k and k.sgpr, "lds": k and k.lds, "scratch": k and k.scratch,
                                     "code_object": k and k.code_object})
        payload["compiles"] = compiles
        md += ["", f"## Every config at M=4096 N=4096 bf16 ({len(compiles)} compiles, FlyDSL's caches bypassed)", "",
               "| kernel | arch | configs | compile median / max | VGPRs | LDS | spills or errors | distinct objects |",
               "|---|---|---|---|---|---|---|---|"]
        for name in KERNELS:
            for arch in flydsl.ARCHS:
                rs = [c for c in compiles if c["kernel"] == name and c["arch"] == arch]
                s = sorted(c["s"] for c in rs)
                md.append(f"| {name} | {arch} | {len(rs)} | {statistics.median(s):.3f} / {s[-1]:.3f} s | "
                          f"{min(c['vgpr'] for c in rs)}-{max(c['vgpr'] for c in rs)} | "
                          f"{min(c['lds'] for c in rs)}-{max(c['lds'] for c in rs)} B | "
                          f"{sum(not c['ok'] for c in rs)} | {len({c['code_object'] for c in rs})} |")
        md += ["", f"total compile time {sum(c['s'] for c in compiles):.1f} s"]
    write("flydsl_cpu", payload, "\n".join(md), out=args.out)


if __name__ == "__main__":
    main()
