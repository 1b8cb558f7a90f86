"""A census process: compiles for one GPU it does not have, answering one JSON request per line on stdin.

Started by flytune_nb.engine.census_pool as ``python -m flytune_nb.engine.census_worker`` with the target's DeviceInfo
in FLYTUNE_CENSUS_DEVICE (JSON), no TRITON_INTERPRET and the target's own TRITON_CACHE_DIR. A fresh process rather
than a fork of flytune's forkserver: that server imported Triton for whatever this machine runs (the interpreter on a
CPU machine), and Triton's own jitted helpers are made for one mode at import.

Requests: ``{"op": "plan", kernel, paths, shape, dtype}`` -> the target's tuning key, space and heuristic default;
``{"op": "compile", kernel, paths, shape, dtype, config}`` -> one census record (status, error, compile_s, binary,
kernels). Replies go to the original stdout; anything else printed (Triton's, a plugin's) goes to stderr.

A FlyDSL kernel builds no Triton kernel: it compiles through FlyDSL (flytune_nb.backends.flydsl.compile_report, for
gfx942 / gfx950 only), its resources read from the code object's metadata, linked by an ld.lld this process finds
itself, so a census needs no ROCM_PATH (``use_linker``).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import asdict

DEVICE_ENV = "FLYTUNE_CENSUS_DEVICE"


def main() -> int:
    # Ctrl-C is the parent's (a terminal sends it to the whole process group): a process dying of it mid-compile would
    # read as its config crashing the compiler. The parent stops handing out configs; stdin's end ends this process.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as SIGINT: a batch scheduler's SIGTERM reaches the whole group
    from flytune_nb.engine.processes import watch_parent

    # stdin's end only reaches a process between compiles: one in a hung compile would outlive a killed parent
    watch_parent(os.getppid())
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray output (C or Python) must not corrupt the replies
    sys.stdout = sys.stderr
    from flytune_nb.core.device import DeviceInfo, enter_compile_mode
    from flytune_nb.errors import first_line

    try:
        device = DeviceInfo(**json.loads(os.environ[DEVICE_ENV]))
        enter_compile_mode(device)
        import triton

        replies.write(json.dumps({"ready": os.getpid(), "triton": triton.__version__}) + "\n")
    except Exception as e:  # noqa: BLE001 - the parent reports it as the census' failure to start
        replies.write(json.dumps({"fatal": f"{type(e).__name__}: {first_line(e)}"}) + "\n")
        return 1
    worker = _Worker(device)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            reply = worker.handle(req)
        except Exception as e:  # noqa: BLE001 - a broken plugin / a bad shape: one line for the parent
            from flytune_nb.errors import UsageError

            reply = {"error": f"{type(e).__name__}: {first_line(e)}", "usage": isinstance(e, UsageError)}
        replies.write(json.dumps(reply, default=str) + "\n")
    return 0


class _Worker:
    def __init__(self, device) -> None:
        self.device = device
        self._inputs: dict = {}

    def _spec(self, req: dict):
        from flytune_nb.core.registry import get_kernel

        return get_kernel(req["kernel"], list(req.get("paths") or ()))

    def _meta_inputs(self, spec, shape: dict, dtype: str):
        from flytune_nb.errors import UsageError
        from flytune_nb.measure.memory import meta_inputs

        key = (spec.name, spec.fingerprint, tuple(sorted(shape.items())), dtype)
        if key not in self._inputs:
            self._inputs.clear()  # one shape at a time: the pool walks shapes in order
            inputs = meta_inputs(spec, shape, dtype, self.device)
            if inputs is None:
                raise UsageError(f"{spec.name}: make_inputs cannot build meta-device inputs, which a census "
                                 f"compiles on (it must not read tensor values)")
            self._inputs[key] = inputs
        return self._inputs[key]

    def handle(self, req: dict) -> dict:
        spec = self._spec(req)
        shape, dtype = spec.check_shape(req["shape"]), spec.check_dtype(req["dtype"])
        if spec.backend == "flydsl":
            self._flydsl(spec)
        if req["op"] == "plan":
            return self.plan(spec, shape, dtype)
        if req["op"] == "compile":
            return self.compile(spec, shape, dtype, req["config"])
        raise ValueError(f"unknown census request {req['op']!r}")

    def _flydsl(self, spec) -> None:
        """Refuse a target FlyDSL does not compile for, and find a linker (before the plan's tuning key: FlyDSL's
        fingerprint reads ROCM_PATH)."""
        from flytune_nb.backends import flydsl
        from flytune_nb.engine.census_pool import census_cache_dir
        flydsl.check_target(spec, self.device)
        flydsl.use_linker(census_cache_dir(self.device).parent / "flydsl-rocm")

    def plan(self, spec, shape: dict, dtype: str) -> dict:
        from flytune_nb.core.key import make_key
        from flytune_nb.core.targets import arch_rules

        key = make_key(spec, shape, dtype, self._meta_inputs(spec, shape, dtype), self.device)
        return {"key": key.digest, "toolchain": dict(key.toolchain), "source": key.source,
                "device": asdict(self.device), "occupancy_unit": arch_rules(self.device).occupancy_unit,
                "default": spec.default(shape, dtype, self.device).to_dict(),
                "space": [c.to_dict() for c in dict.fromkeys(spec.configs(shape, dtype, self.device))]}

    def compile(self, spec, shape: dict, dtype: str, config: dict) -> dict:
        from flytune_nb.backends.triton import binary_digest, compile_kernels
        from flytune_nb.backends.triton_resources import kernel_resources
        from flytune_nb.core.config import Config
        from flytune_nb.core.targets import arch_rules
        from flytune_nb.errors import compile_error_line

        inputs = self._meta_inputs(spec, shape, dtype)
        cfg = Config.from_dict(config)
        t0 = time.perf_counter()
        try:
            if spec.backend == "flydsl":
                from flytune_nb.backends import flydsl

                report = flydsl.compile_report(spec, shape, dtype, cfg, self.device.arch)
                return flydsl.census_record(report, self.device)
            kernels = compile_kernels(spec, inputs, cfg, self.device)
        except Exception as e:  # noqa: BLE001 - a config that does not compile is a census result
            return {"status": "error", "error": compile_error_line(e)[:300],
                    "compile_s": time.perf_counter() - t0, "binary": None, "kernels": []}
        compile_s = time.perf_counter() - t0
        resources = [kernel_resources(k, self.device) for k in kernels]
        rules = arch_rules(self.device)
        warps = max((r["num_warps"] for r in resources), default=0)
        if warps * rules.warp_size > rules.max_block_threads:  # compiles, and no launch would take it
            return {"status": "error", "compile_s": compile_s, "binary": None, "kernels": resources,
                    "error": f"num_warps={warps} is {warps * rules.warp_size} work-items a workgroup on "
                             f"{self.device.arch} ({rules.warp_size}-wide waves); at most {rules.max_block_threads} "
                             f"launch"}
        return {"status": "ok", "error": "", "compile_s": compile_s, "binary": binary_digest(kernels),
                "kernels": resources}


if __name__ == "__main__":
    sys.exit(main())
