"""Ray lanes: one actor per GPU (as SGLang's tuner does), for sweeps over several machines.

The driver (this process) keeps the plan, the strategies and the results store; actors only run tasks. Kernel
folders must exist at the same path on every node (a shared filesystem or the same checkout). An actor that dies
(device fault) or overruns the per-trial timeout is killed and replaced, exactly like a local worker process.
"""
from __future__ import annotations

import os

from flytune_nb.errors import UsageError, first_line
from flytune_nb.engine.lanes import WorkerCrashed, WorkerError, WorkerTimeout

_ACTOR = None


def _actor_class():
    global _ACTOR
    if _ACTOR is None:
        import ray

        @ray.remote(max_restarts=0)
        class FlytuneActor:
            def __init__(self, env: dict) -> None:
                os.environ.update(env)
                from flytune_nb.core.device import ensure_backend

                ensure_backend()

            def call(self, op: str, kwargs: dict):
                import traceback

                from flytune_nb.engine.tasks import HANDLERS

                try:
                    return "ok", HANDLERS[op](**kwargs)
                except Exception as e:  # noqa: BLE001 - shipped to the driver, which decides
                    return "error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=8)}"

        _ACTOR = FlytuneActor
    return _ACTOR


def connect(address: str | None) -> None:
    import ray

    if ray.is_initialized():
        return
    if address in (None, "", "local"):
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    else:
        try:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except ConnectionError as e:  # Ray's words name an `--address` flag, which is not ours
            why = first_line(e).split(". ")[0].rstrip(".")
            raise UsageError(f"--ray {address}: no Ray cluster to connect to ({why}); "
                             f"start one with `ray start --head` (then --ray auto), or use --ray local to start "
                             f"one in this process") from None


class RayLane:
    def __init__(self, gpu: bool, name: str) -> None:
        self.gpu, self.name, self.actor = gpu, name, None
        # The driver's flytune/Triton settings travel to the actor (the cluster's workers were started elsewhere).
        self.env = {k: v for k, v in os.environ.items() if k.startswith(("FLYTUNE_", "TRITON_"))}

    def call(self, op: str, kwargs: dict, timeout: float | None = None):
        import ray

        if self.actor is None:
            opts = {"num_gpus": 1} if self.gpu else {"num_cpus": 1}
            self.actor = _actor_class().options(**opts).remote(self.env)
        try:
            status, value = ray.get(self.actor.call.remote(op, kwargs), timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise WorkerTimeout(f"no answer within {timeout:g} s (Ray actor killed)") from None
        except ray.exceptions.RayActorError as e:
            self.actor = None
            raise WorkerCrashed(f"Ray actor died: {first_line(e)[:200]}") from None
        if status == "error":
            raise WorkerError(value)
        return value

    def close(self) -> None:
        if self.actor is not None:
            import ray

            ray.kill(self.actor)
            self.actor = None


def ray_lanes(address: str | None, gpus: list[int] | None) -> list[RayLane]:
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs the ray package: pip install 'flytune_nb[ray]'") from None
    connect(address)
    n_gpus = int(ray.cluster_resources().get("GPU", 0))
    if n_gpus:
        count = len(gpus) if gpus else n_gpus
    else:  # CPU-only cluster (CI): one actor per requested lane, at most one per CPU
        count = len(gpus) if gpus else max(1, min(2, int(ray.cluster_resources().get("CPU", 1))))
    return [RayLane(gpu=n_gpus > 0, name=f"ray{i}") for i in range(count)]
