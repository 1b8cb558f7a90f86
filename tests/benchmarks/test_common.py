"""What every benchmark script shares: where its result files go."""
import pytest

from benchmarks.common import results_dir
from flytune_nb.errors import UsageError


def test_an_out_folder_that_cannot_be_made_is_one_usage_error(tmp_path):
    """--out under a file (or anywhere mkdir refuses) is a UsageError naming the folder, which python -m benchmarks
    prints as one line, not mkdir's traceback."""
    (tmp_path / "afile").write_text("")
    for out, said in ((tmp_path / "afile", "is a file"), (tmp_path / "afile" / "sub", "cannot make the folder")):
        with pytest.raises(UsageError, match=said) as e:
            results_dir(out)
        assert str(out) in str(e.value)
    assert results_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b" and (tmp_path / "a" / "b").is_dir()
