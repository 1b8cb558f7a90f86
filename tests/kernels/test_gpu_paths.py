"""GPU checks of the K-splitting GEMM paths and the split-row softmax (skipped without a GPU; run on the device:
python -m pytest -m gpu tests/kernels). The interpreter runs programs one after another, so only a GPU exercises the
reduction's memory ordering (partials stored, counter released, the last program's acquire and L2 reads), several
streams at once, and CUDA graph replay of the self-resetting counters."""
import random

import pytest
import torch

from flytune_nb.core.config import Config
from flytune_nb.core.registry import get_kernel
from flytune_nb.measure.correctness import compare
from flytune_nb.measure.timer import GpuTimer
from flytune_nb.measure.trial import evaluate

pytestmark = pytest.mark.gpu


def _timer(dev):
    return GpuTimer(dev, warmup_ms=1, rep_ms=1, min_reps=3)


def _locks_are_zero():
    from flytune_nb.kit import scratch as sc

    return all(int(b.abs().sum()) == 0 for (name, *_), b in sc._BUFFERS.items() if name.endswith(".locks"))


@pytest.mark.parametrize("shape,dtype", [({"M": 1, "N": 4096, "K": 4096}, "bf16"),
                                         ({"M": 64, "N": 4096, "K": 4096}, "fp16"),
                                         ({"M": 37, "N": 200, "K": 328}, "bf16"),
                                         ({"M": 16, "N": 4096, "K": 11008}, "bf16"),
                                         ({"M": 1, "N": 5120, "K": 4096}, "bf16")])
def test_a_sample_of_the_split_k_space_passes(shape, dtype, dev):
    """Six split configs per shape (compiling a space's ~100 would take minutes): decode rows, a 64-row tile, ragged
    M, N and K (masked K loop in every split, wrapped rows), a long K, and 40 tiles (N=5120), whose space offers the
    balancing splits 3 and 5 beside the powers of two."""
    spec = get_kernel("matmul")
    space = [c for c in spec.configs(shape, dtype, dev) if c.get("SPLIT_K")]
    if shape["M"] > 1 and shape["N"] == 200:  # a ragged shape has tiles enough for no split at 132 SMs: force some
        space = [Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": 1, "SPLIT_K": s},
                        num_warps=4, num_stages=3) for k in (32, 64) for s in (2, 3, 5)]
    assert space
    sample = random.Random(0).sample(space, min(6, len(space)))
    failures = [(str(c), t.status, t.reason) for c in sample
                for t in [evaluate(spec, shape, dtype, c, dev, _timer(dev))] if not t.ok]
    assert failures == [] and _locks_are_zero()


@pytest.mark.parametrize("shape,dtype", [({"M": 256, "N": 14336, "K": 4096}, "bf16"),
                                         ({"M": 300, "N": 200, "K": 328}, "fp16"),
                                         ({"M": 256, "N": 11008, "K": 4096}, "bf16"),
                                         ({"M": 4100, "N": 2100, "K": 192}, "bf16")])
def test_a_sample_of_the_stream_k_space_passes(shape, dtype, dev):
    """The persistent stream-K kernel on the shape it is for (112 tiles of 128x256 for 132 SMs), ragged ones (TMA
    zero-filled edges), and many short tiles (3 K steps each: every program walks whole tiles between two cut
    ones); four sampled configs each."""
    spec = get_kernel("matmul")
    space = [c for c in spec.configs(shape, dtype, dev) if c.get("STREAM_K")]
    if not space:
        space = [Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "TMA": 2,
                         "STREAM_K": 1}, num_warps=8 if bn == 256 else 4, num_stages=3) for bn in (128, 256)]
    sample = random.Random(1).sample(space, min(4, len(space)))
    failures = [(str(c), t.status, t.reason) for c in sample
                for t in [evaluate(spec, shape, dtype, c, dev, _timer(dev))] if not t.ok]
    assert failures == [] and _locks_are_zero()


@pytest.mark.parametrize("shape", [{"M": 64, "N": 4096, "K": 4096}, {"M": 48, "N": 6144, "K": 4096},
                                   {"M": 33, "N": 11008, "K": 4096}, {"M": 64, "N": 4096, "K": 11008},
                                   {"M": 40, "N": 200, "K": 328}])
def test_the_64_row_tma_decode_tiles_pass(shape, dev):
    """The space's 64-row persistent TMA tiles at 32 < M <= 64 (rows zero-filled past M, the store clipped) and
    the heuristic's 64-row swapped tile there (a split one at K=11008), widths 32, 64 and 128, K not a multiple of
    BK (328), against the fp64 reference."""
    spec = get_kernel("matmul")
    c = spec.default(shape, "bf16", dev)
    assert c.get("SWAP_AB") == 1 and c["BLOCK_SIZE_M"] == 64, str(c)
    tma = [x for x in spec.configs(shape, "bf16", dev) if x.get("TMA") == 2 and x["BLOCK_SIZE_M"] == 64]
    sample = [c] + [next(x for x in tma if x["BLOCK_SIZE_N"] == bn) for bn in (32, 64, 128)
                    if any(x["BLOCK_SIZE_N"] == bn for x in tma)]
    failures = [(str(x), t.status, t.reason) for x in sample
                for t in [evaluate(spec, shape, "bf16", x, dev, _timer(dev))] if not t.ok]
    assert failures == []


@pytest.mark.parametrize("shape,dtype", [({"M": 1, "N": 6144, "K": 4096}, "bf16"),
                                         ({"M": 16, "N": 14336, "K": 4096}, "fp16"),
                                         ({"M": 32, "N": 4096, "K": 11008}, "bf16"),
                                         ({"M": 5, "N": 200, "K": 328}, "bf16")])
def test_the_swapped_operand_decode_tiles_pass(shape, dtype, dev):
    """The heuristic's swapped-operand TMA tile at M <= 32 (out.T = w @ a.T: rows of a zero-filled past M, the
    transposed store masked), ragged N and K (200, 328), and a sample of the space's other swapped tiles, split ones
    included, against the fp64 reference."""
    spec = get_kernel("matmul")
    c = spec.default(shape, dtype, dev)
    assert c.get("SWAP_AB") == 1 and c.get("TMA") == 1, str(c)
    swapped = [x for x in spec.configs(shape, dtype, dev) if x.get("SWAP_AB") and x != c]
    sample = [c] + [x for x in swapped if x.get("SPLIT_K")][:2] + [x for x in swapped if x["BLOCK_SIZE_N"] == 128][:2]
    failures = [(str(x), t.status, t.reason) for x in sample
                for t in [evaluate(spec, shape, dtype, x, dev, _timer(dev))] if not t.ok]
    assert failures == [] and _locks_are_zero()


@pytest.mark.parametrize("shape,dtype", [({"M": 256, "N": 11008, "K": 4096}, "bf16"),
                                         ({"M": 300, "N": 200, "K": 328}, "fp16"),
                                         ({"M": 1000, "N": 6144, "K": 4096}, "bf16")])
def test_direct_store_tiles_pass(shape, dtype, dev):
    """DIRECT_STORE (the output tile stored from registers, masked at M and N, instead of a clipped TMA store): two
    128x128 or 64x128 tiles a SM on TMA=1, a split of them, persistent 128x256 / 128x128 tiles on deeper pipelines,
    and two persistent programs an SM (CTAS_PER_SM=2: at M=1000, N=6144, 384 tiles of 128x128 for 264 programs, so
    they step), on a ragged shape too (M=300, N=200, K=328: edge tiles in both directions), against the fp64
    reference."""
    spec = get_kernel("matmul")
    sample = [Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "TMA": tma,
                      "DIRECT_STORE": 1, **extra}, num_warps=warps, num_stages=stages)
              for bm, bn, tma, warps, stages, extra in ((128, 128, 1, 4, 3, {}), (64, 128, 1, 4, 4, {}),
                                                        (128, 128, 1, 4, 3, {"SPLIT_K": 2}),
                                                        (128, 256, 2, 8, 4, {}), (128, 128, 2, 4, 6, {}),
                                                        (128, 128, 2, 4, 3, {"CTAS_PER_SM": 2}))]
    failures = [(str(x), t.status, t.reason) for x in sample
                for t in [evaluate(spec, shape, dtype, x, dev, _timer(dev))] if not t.ok]
    assert failures == [] and _locks_are_zero()


@pytest.mark.parametrize("config", [
    Config({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "SPLIT_K": 8},
           num_warps=4, num_stages=4),
    Config({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "TMA": 1, "SWAP_AB": 1,
            "SPLIT_K": 4}, num_warps=4, num_stages=4),
    Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "TMA": 2,
            "STREAM_K": 1}, num_warps=8, num_stages=3),
    Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 8, "TMA": 2,
            "STREAM_K": 1}, num_warps=4, num_stages=4),
    Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "TMA": 1,
            "SPLIT_K": 3}, num_warps=8, num_stages=3)])
def test_the_reduction_is_deterministic(config, dev):
    """Fifty calls, the same bits every time (a fixed-order sum whichever program arrives last), and the counters
    are all zero after each: the last arriver reset them. At M=256, N=14336 stream-K's 112 tiles of 128x256 are all
    cut; 448 of 64x128 make three whole rounds on 132 SMs and a tail of 52 tiles that is cut; the TMA split cuts
    each of 112 tiles of 128x256 in three."""
    spec = get_kernel("matmul")
    M = 256 if config["BLOCK_SIZE_M"] >= 64 else 16  # decode rows for the decode tiles
    inputs = spec.make_inputs({"M": M, "N": 14336, "K": 4096}, "bf16", dev)
    first = spec.run(inputs, config).clone()
    assert compare(first, spec.reference(inputs), spec.tol("bf16"), spec.element_tol("bf16")).ok
    for _ in range(50):
        assert torch.equal(spec.run(inputs, config), first)
    torch.cuda.synchronize()
    assert _locks_are_zero()


def test_split_calls_on_two_streams_at_once_do_not_share_partials(dev):
    """Two streams, each a split-K GEMM on its own inputs, enqueued back to back without syncing: each stream has
    its own scratch, so both results are right."""
    spec = get_kernel("matmul")
    cfg = Config({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "SPLIT_K": 4},
                 num_warps=4, num_stages=3)
    pairs = [spec.make_inputs({"M": 8, "N": 4096, "K": 4096}, "fp16", dev) for _ in range(2)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    torch.cuda.synchronize()
    outs = [[], []]
    for _ in range(20):
        for i, s in enumerate(streams):
            with torch.cuda.stream(s):
                outs[i].append(spec.run({"a": pairs[i]["a"], "w": pairs[i]["w"]}, cfg))
    torch.cuda.synchronize()
    for i in range(2):
        ref = spec.reference(pairs[i])
        assert all(compare(o, ref, spec.tol("fp16")).ok for o in outs[i])


@pytest.mark.parametrize("kernel,shape,config", [
    ("matmul", {"M": 4, "N": 4096, "K": 4096},
     Config({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "SPLIT_K": 4},
            num_warps=4, num_stages=4)),
    ("matmul", {"M": 256, "N": 14336, "K": 4096},
     Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "TMA": 2, "STREAM_K": 1},
            num_warps=8, num_stages=3)),
    ("matmul", {"M": 256, "N": 11008, "K": 4096},
     Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "TMA": 1, "SPLIT_K": 3},
            num_warps=8, num_stages=3)),
    ("softmax", {"M": 2, "N": 152064}, Config({"BLOCK_N": 2048, "SPLIT_N": 64}, num_warps=8, num_stages=1))])
def test_graph_replay_of_the_split_paths(kernel, shape, config, dev):
    """Captured in a CUDA graph (as SGLang captures decode) after one eager call, replayed ten times on new inputs
    copied in place: right every time (the counters reset themselves, the scratch pointer stays valid)."""
    spec = get_kernel(kernel)
    inputs = spec.make_inputs(shape, "bf16", dev)
    spec.run(inputs, config)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = spec.run(inputs, config)
    for _ in range(10):
        fresh = spec.make_inputs(shape, "bf16", dev)
        for name, t in fresh.items():
            if name not in spec.outputs:
                inputs[name].copy_(t)
        graph.replay()
        torch.cuda.synchronize()
        assert compare(out, spec.reference(inputs), spec.tol("bf16"), spec.element_tol("bf16")).ok
    assert _locks_are_zero()


@pytest.mark.parametrize("shape", [{"M": 1, "N": 152064}, {"M": 16, "N": 128256}, {"M": 3, "N": 32000},
                                   {"M": 64, "N": 129280}])
def test_softmax_vocabulary_space_passes(shape, dev):
    """Every split-row config (two launches, stats in per-stream scratch) and the single 32000-wide pass on 32
    warps, against the fp64 reference; a sample of the rest."""
    spec = get_kernel("softmax")
    space = spec.configs(shape, "bf16", dev)
    split = [c for c in space if c.get("SPLIT_N")]
    rest = random.Random(2).sample([c for c in space if not c.get("SPLIT_N")], 6)
    failures = [(str(c), t.status, t.reason) for c in split + rest
                for t in [evaluate(spec, shape, "bf16", c, dev, _timer(dev))] if not t.ok]
    assert failures == []


def test_softmax_with_masked_logits_on_the_gpu(dev):
    spec = get_kernel("softmax")
    x = (torch.randn(4, 152064, device=dev.torch_device) * 4).bfloat16()
    x[:, ::3] = float("-inf")
    x[1, :100000] = float("-inf")
    for cfg in (spec.default({"M": 4, "N": 152064}, "bf16", dev),
                Config({"BLOCK_N": 4096}, num_warps=8, num_stages=2)):
        out = spec.run({"x": x}, cfg)
        assert not out.isnan().any() and compare(out, spec.reference({"x": x}), spec.tol("bf16")).ok


@pytest.mark.parametrize("kernel", ["rmsnorm", "fused_add_rmsnorm", "softmax"])
@pytest.mark.parametrize("N", [7168, 8192])
def test_row_configs_pass_at_wide_model_rows(kernel, N, dev):
    """DeepSeek-V3's 7168 (EVEN looped blocks of 256-1024, masked ones of 2048-4096, a masked single pass of 8192)
    and 8192 (the unmasked single pass): the default, one config per block size, and a sample of the rest."""
    spec = get_kernel(kernel)
    shape = {"M": 65, "N": N}
    space = spec.configs(shape, "bf16", dev)
    per_block = list({c["BLOCK_N"]: c for c in space}.values())
    picked = list(dict.fromkeys([spec.default(shape, "bf16", dev)] + per_block + random.Random(3).sample(space, 6)))
    failures = [(str(c), t.status, t.reason) for c in picked
                for t in [evaluate(spec, shape, "bf16", c, dev, _timer(dev))] if not t.ok]
    assert failures == []


@pytest.mark.parametrize("NK", [(4096, 4096), (14336, 4096), (11008, 4096), (4096, 11008), (6144, 4096),
                                (28672, 4096)])
@pytest.mark.parametrize("M", [1, 64, 96, 128, 256, 1024])
def test_matmul_defaults_of_the_benchmark_shapes_are_correct(NK, M, dev):
    spec = get_kernel("matmul")
    shape = {"M": M, "N": NK[0], "K": NK[1]}
    t = evaluate(spec, shape, "bf16", spec.default(shape, "bf16", dev), dev, _timer(dev))
    assert t.ok, (t.config, t.reason)
