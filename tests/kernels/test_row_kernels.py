"""The row kernels (rmsnorm, fused_add_rmsnorm, softmax): every config of the pruned space is correct (interpreter on CPU, small shapes),
both the single-pass and the looped form, and the heuristic default is always in the space."""
import pytest
import torch

from flytune_nb.core.config import Config
from flytune_nb.core.registry import get_kernel
from flytune_nb.measure.correctness import compare
from flytune_nb.measure.trial import evaluate

KERNELS = ("rmsnorm", "fused_add_rmsnorm", "softmax")


def _distinct_blocks(space):
    """One config per (BLOCK_N, BLOCK_M) (the interpreter ignores warps/stages, so that is what changes the
    computation). At M=3, BLOCK_M=4 leaves the last program a row past M: masked, and never read as data."""
    return list({(c["BLOCK_N"], c.get("BLOCK_M", 1)): c for c in space}.values())


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("N", [1, 100, 1000])
def test_every_block_form_is_correct(kernel, dtype, N, dev, cpu_timer):
    spec = get_kernel(kernel)
    shape = {"M": 3, "N": N}
    space = spec.configs(shape, dtype, dev)
    assert space, "empty space"
    if N <= 1000:
        assert {c.get("BLOCK_M", 1) for c in space} == {1, 2, 4}  # multi-row single passes are in the space
    for cfg in _distinct_blocks(space):
        t = evaluate(spec, shape, dtype, cfg, dev, cpu_timer)
        assert t.ok, (cfg, t.status, t.reason)
        assert t.rel_error <= spec.tol(dtype)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("N", [1, 7, 100, 1000, 4096, 5120, 8192, 32768, 65536, 262144])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_default_is_in_the_space_and_space_is_pruned(kernel, N, dtype, dev):
    spec = get_kernel(kernel)
    shape = {"M": 64, "N": N}
    space = spec.configs(shape, dtype, dev)
    assert spec.default(shape, dtype, dev) in space
    assert len(space) == len(set(space)) <= 100
    for c in space:
        threads = c.num_warps * 32
        assert c.get("BLOCK_M", 1) * c["BLOCK_N"] / threads <= 64  # pruned: no config that must spill
        assert c.get("BLOCK_M", 1) == 1 or c["BLOCK_N"] >= N  # several rows per program only in a single pass


def test_wrong_eps_or_missing_weight_is_caught_by_the_check(dev):
    """The reference is sharp enough to catch the mistakes kernels actually make."""
    spec = get_kernel("rmsnorm")
    inputs = spec.make_inputs({"M": 4, "N": 256}, "fp32", dev)
    ref = spec.reference(inputs)
    no_weight = spec.reference(dict(inputs, weight=torch.ones_like(inputs["weight"])))
    assert not compare(no_weight, ref, spec.tol("fp32")).ok
    big_eps = spec.reference(dict(inputs, eps=1e-1))
    assert not compare(big_eps, ref, spec.tol("fp32")).ok


def test_rows_may_be_strided_and_batch_dims_flatten(dev):
    spec = get_kernel("rmsnorm")
    wide = torch.randn(2, 3, 128)
    x = wide[..., :100]  # row stride 128, last dim contiguous
    w = torch.randn(100)
    out = torch.empty(2, 3, 100)
    spec.run({"x": x, "weight": w, "out": out}, Config({"BLOCK_N": 128}, num_warps=1))
    assert compare(out, spec.reference({"x": x, "weight": w}), 1e-5).ok


def test_fused_add_rmsnorm_updates_residual_in_place(dev):
    spec = get_kernel("fused_add_rmsnorm")
    inputs = spec.make_inputs({"M": 4, "N": 300}, "fp32", dev)
    x, r0 = inputs["x"].clone(), inputs["residual"].clone()
    y, r = spec.run(inputs, Config({"BLOCK_N": 256}, num_warps=1, num_stages=2))
    assert r.data_ptr() == inputs["residual"].data_ptr()
    torch.testing.assert_close(r, x + r0)
    assert compare(y, spec.reference({**inputs, "x": x, "residual": r0})[0], 1e-5).ok


def test_softmax_inputs_punish_a_missing_max_subtraction(dev):
    """The +100 logit offset makes exp(x) overflow fp32: a kernel that skips the row max cannot pass by luck."""
    spec = get_kernel("softmax")
    inputs = spec.make_inputs({"M": 4, "N": 300}, "fp32", dev)
    x = inputs["x"].float()
    naive = torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)
    assert not compare(naive, spec.reference(inputs), spec.tol("fp32")).ok
    out = spec.run(inputs, spec.default({"M": 4, "N": 300}, "fp32", dev))
    assert compare(out, spec.reference(inputs), spec.tol("fp32")).ok
    torch.testing.assert_close(out.sum(-1), torch.ones(4), rtol=0, atol=1e-5)


def test_softmax_heuristic_gives_each_thread_32_bytes_of_the_row():
    """An exhaustive H200 sweep: at N=4096 bf16, 16 warps (16 bytes a thread) were 1.14-1.22x slower than 8
    from M=1024 on; at N=16384, 32 warps beat 16."""
    from tests.conftest import H200

    spec = get_kernel("softmax")
    warps = {n: spec.default({"M": 4096, "N": n}, "bf16", H200).num_warps for n in (1024, 4096, 8192, 16384)}
    assert warps == {1024: 2, 4096: 8, 8192: 16, 16384: 32}
    assert spec.default({"M": 4096, "N": 4096}, "bf16", H200) in spec.configs({"M": 4096, "N": 4096}, "bf16", H200)


@pytest.mark.parametrize("kernel", KERNELS)
def test_several_rows_per_program_without_a_single_pass_is_refused(kernel, dev):
    """BLOCK_M > 1 exists only in the single pass: with BLOCK_N < N the kernel would leave columns unwritten, so the
    launcher refuses it with one clear error before launching."""
    from flytune_nb.core.config import ConfigError

    spec = get_kernel(kernel)
    inputs = spec.make_inputs({"M": 4, "N": 1024}, "fp32", dev)
    with pytest.raises(ConfigError, match="single pass"):
        spec.run(inputs, Config({"BLOCK_N": 256, "BLOCK_M": 2}, num_warps=1, num_stages=1))


def test_an_edited_heuristic_naming_block_m_1_is_scored_on_the_stored_one_row_config(dev, tmp_path):
    """The heuristic editor's re-scoring: BLOCK_M=1 written out is the stored config without BLOCK_M, not a config
    'never measured'."""
    from flytune_nb.analysis.heuristic_edit import rescore
    from flytune_nb.engine.sweep import Sweep

    spec = get_kernel("rmsnorm")
    results = Sweep("rmsnorm", "M=2 N=200", ["fp32"], db=tmp_path / "r.db", isolate=False, baselines=()).run()
    explicit = lambda shape, dtype, device: Config({"BLOCK_N": 256, "BLOCK_M": 1}, num_warps=1, num_stages=1)  # noqa: E731
    [row] = rescore(explicit, results, dev, spec.canonical).rows
    assert row.new == Config({"BLOCK_N": 256}, num_warps=1, num_stages=1) and row.new_ms == row.new_ms  # not nan
    assert row.new_ms < float("inf")


def test_a_heuristic_writing_an_optional_knob_at_its_default_gives_the_spaces_name(dev):
    """The spec puts its heuristic and space through canonical(): a rule that writes BLOCK_M=1 (an edit saved from
    the workbench, a plugin) gives the config the space lists, so a sweep times it once under one name."""
    import dataclasses

    spec = get_kernel("rmsnorm")
    explicit = dataclasses.replace(spec, default=lambda shape, dtype, device: Config(
        {"BLOCK_N": 256, "BLOCK_M": 1}, num_warps=1, num_stages=1))
    picked = explicit.default({"M": 4, "N": 200}, "fp32", dev)
    assert picked == Config({"BLOCK_N": 256}, num_warps=1, num_stages=1)
    assert picked in explicit.configs({"M": 4, "N": 200}, "fp32", dev)


@pytest.mark.parametrize("config", [Config({"BLOCK_N": 128}, num_warps=1, num_stages=2),  # looped, one program a row
                                    Config({"BLOCK_N": 128, "SPLIT_N": 4}, num_warps=1, num_stages=1)])
def test_softmax_over_masked_logits_is_exact(config, dev):
    """Masked logits (-inf at every 4th column, as a sampler's vocabulary mask writes them): the lanes of a looped or
    split row that only ever see -inf hold max -inf and sum 0, not exp(-inf + inf) = NaN, which in the looped form
    would make the whole row NaN here."""
    spec = get_kernel("softmax")
    x = torch.randn(3, 1000) * 4
    x[:, ::4] = float("-inf")
    x[2, :500] = float("-inf")  # a whole first chunk of -inf: that chunk's (max, sum) is (-inf, 0)
    out = spec.run({"x": x}, config)
    assert not out.isnan().any()
    assert compare(out, spec.reference({"x": x}), spec.tol("fp32")).ok
    assert (out[:, ::4] == 0).all()


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("N,block,split", [(1000, 128, 2), (1000, 128, 8), (4096, 512, 4), (300, 256, 4)])
def test_split_row_softmax_is_correct(N, block, split, dtype, dev, cpu_timer):
    """A row over SPLIT_N programs, two launches: ragged last blocks (1000 = 7.8 blocks of 128), chunks of whole
    blocks, even rows (EVEN: no masks), and more splits than blocks (300 over 4: chunks past the row are empty and
    contribute (-inf, 0))."""
    spec = get_kernel("softmax")
    t = evaluate(spec, {"M": 3, "N": N}, dtype, Config({"BLOCK_N": block, "SPLIT_N": split}, num_warps=2,
                                                        num_stages=1), dev, cpu_timer)
    assert t.ok, (t.status, t.reason)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("N,block", [(1024, 256), (1024, 1024), (768, 256), (768, 512)])
def test_even_and_ragged_blocks_are_correct(kernel, dtype, N, block, dev, cpu_timer):
    """BLOCK_N dividing N takes the unmasked loads and stores (EVEN: 1024/256, 1024/1024 single pass, 768/256);
    768/512 the masked ones; each against the fp64 reference (outputs poisoned first, so a skipped column fails)."""
    spec = get_kernel(kernel)
    t = evaluate(spec, {"M": 3, "N": N}, dtype, Config({"BLOCK_N": block}, num_warps=2, num_stages=1), dev,
                 cpu_timer)
    assert t.ok, (t.status, t.reason)


def test_fused_add_looped_writes_the_residual_once_and_normalises_the_stored_one(dev):
    """The looped form (Inductor's two passes) recomputes x + r in pass two and writes the residual there only: the
    residual and y are those of the single pass, bit for bit, and both match the fp64 reference."""
    spec = get_kernel("fused_add_rmsnorm")
    inputs = spec.make_inputs({"M": 4, "N": 1024}, "bf16", dev)
    a = {k: v.clone() for k, v in inputs.items()}
    b = {k: v.clone() for k, v in inputs.items()}
    y1, r1 = spec.run(a, Config({"BLOCK_N": 1024}, num_warps=4, num_stages=1))
    y2, r2 = spec.run(b, Config({"BLOCK_N": 256}, num_warps=4, num_stages=2))
    assert torch.equal(r1, r2) and torch.equal(y1, y2)
    y_ref, r_ref = spec.reference(inputs)
    assert compare(r1, r_ref, spec.tol("bf16")).ok and compare(y1, y_ref, spec.tol("bf16")).ok


def test_softmax_vocabulary_rows_default_to_one_pass_or_a_split_row():
    """A 32000-token row (64 KiB bf16) in one pass on 32 warps; 152064 tokens at decode sizes split so the grid
    covers the SMs (M=1: 128 programs of 1188 columns); at M >= SMs one looped program a row, in 16 KiB blocks on
    32 warps (M=256 on the H200: 63.7 us, the sweep's best, against 103.7 for 4 KiB blocks on 8 warps)."""
    from tests.conftest import H200

    spec = get_kernel("softmax")
    assert spec.default({"M": 1, "N": 32000}, "bf16", H200) == Config({"BLOCK_N": 32768}, num_warps=32, num_stages=1)
    for M in (1, 16, 64):
        c = spec.default({"M": M, "N": 152064}, "bf16", H200)
        assert c["BLOCK_N"] == 2048 and c["SPLIT_N"] >= 2 and M * c["SPLIT_N"] >= 128
        assert c in spec.configs({"M": M, "N": 152064}, "bf16", H200)
    for M in (256, 4096):
        big = spec.default({"M": M, "N": 152064}, "bf16", H200)
        assert big.get("SPLIT_N") is None and (big["BLOCK_N"], big.num_warps) == (8192, 32)
        assert big in spec.configs({"M": M, "N": 152064}, "bf16", H200)


def test_wide_rows_not_a_power_of_two_default_to_what_the_h200_sweeps_timed_best():
    """N=7168 bf16 at M=4096 and 16384 (stores/rows_wide.db, graph replay): rmsnorm's warps follow the row's 14 KiB,
    not its 16 KiB block (8 warps: 30.8 / 114.1 us against 32.7 / 122.2 on 16); fused_add_rmsnorm loops over half
    the padded row on 16 warps (59.5 / 222.9 us, level with torch.compile, against 64.4 / 253.1 for a quarter on 8).
    Power-of-two rows keep their defaults."""
    from tests.conftest import H200

    rms, fused = get_kernel("rmsnorm"), get_kernel("fused_add_rmsnorm")
    for M in (4096, 16384):
        shape = {"M": M, "N": 7168}
        assert rms.default(shape, "bf16", H200) == Config({"BLOCK_N": 8192}, num_warps=8, num_stages=1)
        assert fused.default(shape, "bf16", H200) == Config({"BLOCK_N": 4096}, num_warps=16, num_stages=2)
    assert rms.default({"M": 4096, "N": 4096}, "bf16", H200).num_warps == 8
    assert rms.default({"M": 4096, "N": 8192}, "bf16", H200).num_warps == 16
    assert fused.default({"M": 4096, "N": 4096}, "bf16", H200) == Config({"BLOCK_N": 2048}, num_warps=8,
                                                                          num_stages=2)
    assert fused.default({"M": 4096, "N": 5120}, "bf16", H200)["BLOCK_N"] == 2048  # 5120 fills 5/8 of 8192
