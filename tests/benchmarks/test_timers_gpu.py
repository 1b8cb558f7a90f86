"""The benchmarks' side-by-side timers on a GPU (skipped without one; run on the device:
python -m pytest -m gpu tests/benchmarks): the same work timed as two sides reads the same, and twice the work
reads about twice the time, in both modes."""
import pytest
import torch

from benchmarks.serving_vs_torch import Timers

pytestmark = pytest.mark.gpu


def test_two_copies_of_one_gemm_read_alike_and_a_double_gemm_twice_as_long(dev):
    a = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    out1, out2 = torch.empty_like(a), torch.empty_like(a)

    def double():
        torch.matmul(a, w.T, out=out2)
        torch.matmul(a, w.T, out=out2)

    sides = {"one": lambda: torch.matmul(a, w.T, out=out1), "same": lambda: torch.matmul(a, w.T, out=out2),
             "double": double}
    timers = Timers(dev, 10.0)
    for times in (timers.graph_each(sides), timers.flushed_each(sides)):
        assert 0.95 < times["same"] / times["one"] < 1.05, times
        assert 1.7 < times["double"] / times["one"] < 2.2, times
