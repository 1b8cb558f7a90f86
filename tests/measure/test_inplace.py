"""In-place safety: tuning fused_add_rmsnorm on the caller's tensors must leave them as they were.

Without restore, every timed rep adds x into the residual again (Triton without restore_value); the tuned call then
starts from a drifted residual. With restore, the tuned call equals one clean run, bit for bit.
"""
import torch

from flytune_nb.core.registry import get_kernel
from flytune_nb.measure.timer import CpuTimer
from flytune_nb.serve.tuned import TunedKernel
from tests.conftest import PLUGINS

SHAPE = {"M": 4, "N": 256}


def _tune_then_call(restore: bool, dev, tmp_path):
    spec = get_kernel("fused_add_rmsnorm")
    inputs = spec.make_inputs(SHAPE, "fp32", dev)
    clean = {k: v.clone() for k, v in inputs.items()}
    op = TunedKernel(spec, device=dev, cache_dir=tmp_path, autotune=True, restore=restore, timer=CpuTimer(reps=2))
    y, residual = op(**inputs)
    assert op.last_source == "search"
    chosen = op.last_result.pick.config  # what it served: the selection stage's winner
    y_clean, r_clean = spec.run(clean, chosen)  # one clean run of the same config
    return y, residual, y_clean, r_clean, op


def test_without_restore_the_residual_drifts(dev, tmp_path):
    y, residual, y_clean, r_clean, op = _tune_then_call(False, dev, tmp_path)
    n_launches = sum(t.reps + 1 for t in op.last_result.trials)  # warm-up + timed reps per config
    assert n_launches > 10
    drift = (residual - r_clean).abs().max().item()
    assert drift > 1.0, drift  # x (std 1) added many extra times
    assert not torch.equal(y, y_clean)


def test_with_restore_the_tuned_call_equals_one_clean_run(dev, tmp_path):
    y, residual, y_clean, r_clean, _ = _tune_then_call(True, dev, tmp_path)
    assert torch.equal(residual, r_clean)
    assert torch.equal(y, y_clean)


def test_zeroes_are_reset_on_the_real_call_too(dev, tmp_path):
    """Triton's autotuner does not re-apply reset_to_zero on the real launch after tuning; ours does, so an
    accumulating output starts from zero on every call."""
    import dataclasses

    spec = get_kernel("toy", [PLUGINS])
    # Treat the output as an accumulator: if it were not zeroed before the real call, the stale value would stay.
    acc_spec = dataclasses.replace(spec, outputs=(), zeroes=("out",))
    inputs = acc_spec.make_inputs({"N": 64}, "fp32", dev)
    inputs["out"].fill_(123.0)
    seen = []
    real_run = acc_spec.run

    def spying_run(i, c):
        seen.append(i["out"].clone())
        return real_run(i, c)

    op = TunedKernel(dataclasses.replace(acc_spec, run=spying_run), device=dev, cache_dir=tmp_path)
    op(**inputs)
    assert torch.count_nonzero(seen[-1]) == 0
