import json

import pytest

from flytune_nb.core.config import Config, ConfigError


def test_frozen_hashable_and_order_independent():
    a = Config({"BLOCK_N": 1024, "SPLIT": 2}, num_warps=8, num_stages=2)
    b = Config({"SPLIT": 2, "BLOCK_N": 1024}, num_warps=8, num_stages=2)
    assert a == b and hash(a) == hash(b)
    assert len({a, b, a.replace(num_warps=4)}) == 2
    with pytest.raises(AttributeError):
        a.num_warps = 2  # frozen


def test_string_and_json_round_trip_are_stable():
    c = Config({"BLOCK_N": 1024}, num_warps=8, num_stages=2, waves_per_eu=2, kpack=2)
    assert str(c) == "BLOCK_N=1024,kpack=2,num_stages=2,num_warps=8,waves_per_eu=2"
    assert Config.parse(str(c)) == c
    assert Config.from_json(c.to_json()) == c
    assert json.loads(c.to_json()) == {"BLOCK_N": 1024, "kpack": 2, "num_stages": 2, "num_warps": 8,
                                       "waves_per_eu": 2}
    assert c.to_json() == Config.from_json(c.to_json()).to_json()  # byte-identical


def test_kernel_params_vs_launch_options():
    c = Config({"BLOCK_N": 512}, num_warps=2, num_stages=3)
    assert c.kwargs == {"BLOCK_N": 512}
    assert c["BLOCK_N"] == 512 and c["num_warps"] == 2
    assert c.launch_options("cuda") == {"num_warps": 2, "num_stages": 3}


def test_hip_only_options_never_reach_cuda():
    c = Config({"BLOCK_N": 512}, waves_per_eu=2, matrix_instr_nonkdim=16)
    assert c.launch_options("hip") == {"num_warps": 4, "num_stages": 1, "waves_per_eu": 2, "matrix_instr_nonkdim": 16}
    for backend in ("cuda", "interpreter"):
        with pytest.raises(ConfigError, match="AMD-only"):
            c.launch_options(backend)


@pytest.mark.parametrize("bad", [
    {"BLOCK_N": "big"}, {"BLOCK_N": 1.5}, {"BLOCK_N": True}, {"num_warps": 3}, {"num_stages": 0},
    {"num_warps": None}, {"BLOCK_N": None},
])
def test_bad_values_are_rejected_with_a_clear_message(bad):
    with pytest.raises(ConfigError):
        Config.from_dict(bad)


def test_from_json_rejects_non_objects_and_garbage():
    with pytest.raises(ConfigError, match="JSON object"):
        Config.from_json("[1, 2]")
    with pytest.raises(ConfigError, match="not valid JSON"):
        Config.from_json("{nope")
    with pytest.raises(ConfigError, match="NAME=INT"):
        Config.parse("BLOCK_N")


def test_launch_options_a_config_does_not_have_are_neither_passed_nor_written():
    """A DSL without warps or stages (FlyDSL) reads its configs back without them; num_ctas and maxnreg (an adopted
    @triton.autotune config's) round-trip when set and are absent otherwise."""
    bare = Config.from_dict({"BLOCK_THREADS": 256, "VEC": 8})
    assert bare.num_warps is None and bare.num_stages is None
    assert bare.to_dict() == {"BLOCK_THREADS": 256, "VEC": 8} and bare.launch_options("hip") == {}
    assert Config.from_dict(bare.to_dict()) == bare
    hopper = Config({"BLOCK": 64}, num_warps=8, num_stages=3, num_ctas=2, maxnreg=128)
    assert hopper.launch_options("cuda") == {"num_warps": 8, "num_stages": 3, "num_ctas": 2, "maxnreg": 128}
    assert Config.from_dict(hopper.to_dict()) == hopper and Config.parse(str(hopper)) == hopper
    assert "num_ctas" not in Config({"BLOCK": 64}).to_dict()  # built in code: 4 warps, 1 stage, nothing else
    with pytest.raises(ConfigError, match="num_ctas must be >= 1"):
        Config({"BLOCK": 64}, num_ctas=0)
