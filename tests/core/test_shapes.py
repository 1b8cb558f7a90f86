import pytest

from flytune_nb.core.shapes import SGLANG_BATCH_SIZES, GridError, grid_shapes, parse_grid


def test_grid_is_the_cartesian_product_in_axis_order():
    assert parse_grid("N=4096,8192 M=1,64", ("M", "N")) == [
        {"M": 1, "N": 4096}, {"M": 1, "N": 8192}, {"M": 64, "N": 4096}, {"M": 64, "N": 8192}]
    assert parse_grid({"M": [1, 2], "N": 8}, ("M", "N")) == [{"M": 1, "N": 8}, {"M": 2, "N": 8}]
    assert [s["M"] for s in parse_grid("M=sglang N=4096", ("M", "N"))] == list(SGLANG_BATCH_SIZES)


def test_the_sglang_preset_sets_only_the_batch_axis():
    assert [s["M"] for s in parse_grid("M=SGLang N=8", ("M", "N"), batch_axis="M")] == list(SGLANG_BATCH_SIZES)
    with pytest.raises(GridError, match=r"axis N: 'sglang' is a list of batch sizes, for the batch axis M "
                                        r"\(write e.g. M=sglang N=4096\)"):
        parse_grid("M=1 N=sglang", ("M", "N"), batch_axis="M")
    with pytest.raises(GridError, match="axis N: 'sglang'"):
        grid_shapes({"M": "sglang", "N": "sglang"}, ("M", "N"), "M")


@pytest.mark.parametrize("text, msg", [
    ("M=1,x N=4", "'x' is not a positive integer"),
    ("M=0 N=4", "'0'|>= 1"),
    ("M=1", "missing \\['N'\\]"),
    ("M=1 N=2 K=3", "unknown \\['K'\\]"),
    ("M1 N=2", "is not AXIS=v1,v2"),
    ("M= N=2", "no values"),
    ("M=1 M=2 N=2", "given twice"),
    ("M=-4 N=2", "not a positive integer"),
])
def test_bad_grids_say_what_is_wrong(text, msg):
    with pytest.raises(GridError, match=msg):
        parse_grid(text, ("M", "N"))


def test_grid_refuses_an_empty_value_and_other_scripts_digits():
    from flytune_nb.core.shapes import GridError, parse_values

    assert parse_values("M", "1,64,") == [1, 64]  # one trailing comma is harmless
    for bad in ("1,,4", "١,2"):  # a lost value; an Arabic-Indic digit
        with pytest.raises(GridError, match="axis M"):
            parse_values("M", bad)


def test_a_value_too_long_to_read_as_a_number_is_one_grid_error():
    """Python refuses int() of more than 4300 digits with a ValueError of its own (sys.set_int_max_str_digits)."""
    from flytune_nb.core.shapes import GridError, parse_values

    with pytest.raises(GridError, match="axis M: a value of 5000 digits is too large"):
        parse_values("M", "1" * 5000)
    with pytest.raises(GridError, match="axis M: a value of 5000 digits"):
        parse_grid({"M": "1," + "9" * 5000, "N": 8}, ("M", "N"))




def test_a_shape_is_written_as_the_grid_syntax_writes_it():
    from flytune_nb.core.shapes import parse_grid, shape_text

    shape = {"M": 4, "N": 1024}
    assert shape_text(shape) == "M=4 N=1024" and parse_grid(shape_text(shape), ("M", "N")) == [shape]


def test_grid_shapes_takes_text_a_dict_or_shape_dicts_and_refuses_anything_else():
    axes = ("M", "N")
    assert grid_shapes("M=1,2 N=8", axes) == grid_shapes({"M": [1, 2], "N": 8}, axes) == [
        {"M": 1, "N": 8}, {"M": 2, "N": 8}]
    assert grid_shapes(({"M": 3, "N": 5},), axes) == [{"M": 3, "N": 5}]
    for bad, got in ((5, "got int 5"), (["M=1", "N=8"], "got list"), (None, "got NoneType")):
        with pytest.raises(GridError, match="grid must be text like 'M=1,64 N=4096'.*" + got):
            grid_shapes(bad, axes)


def test_a_grid_written_as_json_text_reads_as_its_dict():
    """papermill's -p passes a dict typed as JSON as text: it is the dict, and a broken one says so."""
    from flytune_nb.core.shapes import GridError, parse_grid

    assert parse_grid('{"M": "1,2", "N": 256}', ("M", "N")) == [{"M": 1, "N": 256}, {"M": 2, "N": 256}]
    assert parse_grid(' {"N": [8, 16], "M": [4]}', ("M", "N")) == [{"M": 4, "N": 8}, {"M": 4, "N": 16}]
    with pytest.raises(GridError, match="starts like a JSON object but is not one"):
        parse_grid('{"M": 1, "N": 256', ("M", "N"))
    with pytest.raises(GridError, match="unknown \\['K'\\]"):
        parse_grid('{"M": 1, "K": 256}', ("M", "N"))
