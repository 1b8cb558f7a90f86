"""environ(): variables set for a block, every one as it was after, also when the block cannot start."""
import os

import pytest

from flytune_nb.core.environ import environ


def test_variables_are_put_back_after_the_block_and_after_a_value_that_cannot_be_set(monkeypatch):
    monkeypatch.setenv("FLYTUNE_TEST_KEPT", "before")
    monkeypatch.delenv("FLYTUNE_TEST_NEW", raising=False)
    with environ({"FLYTUNE_TEST_KEPT": None, "FLYTUNE_TEST_NEW": "1"}):
        assert "FLYTUNE_TEST_KEPT" not in os.environ and os.environ["FLYTUNE_TEST_NEW"] == "1"
    assert os.environ["FLYTUNE_TEST_KEPT"] == "before" and "FLYTUNE_TEST_NEW" not in os.environ
    # a folder name holding NUL cannot be an environment value: the ones set before it are undone too
    with pytest.raises(ValueError):
        with environ({"FLYTUNE_TEST_NEW": "1", "FLYTUNE_TEST_KEPT": "a\0b"}):
            pass
    assert os.environ["FLYTUNE_TEST_KEPT"] == "before" and "FLYTUNE_TEST_NEW" not in os.environ
