"""core.paths: the file that stands where a folder must be made."""
from flytune_nb.core.paths import file_in_the_way


def test_the_first_file_from_the_root_down_is_the_one_in_the_way(tmp_path):
    (tmp_path / "runs.db").write_text("")
    (tmp_path / "d").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "d")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert file_in_the_way(tmp_path / "runs.db" / "sub" / "x.db") == tmp_path / "runs.db"
    assert file_in_the_way(tmp_path / "runs.db") == tmp_path / "runs.db"
    assert file_in_the_way(tmp_path / "d" / "new" / "deeper") is None
    assert file_in_the_way(tmp_path / "link" / "new") is None  # a link to a folder is a folder to mkdir
    assert file_in_the_way(tmp_path / "dangling" / "new") == tmp_path / "dangling"
