import os

import pytest

from tests.conftest import CENSUS_CACHE


class CensusPools(dict):
    """{target alias: CensusPool}, each pool started on first use: 2 processes compiling for that target into its
    folder of tests/conftest.CENSUS_CACHE (or $FLYTUNE_CENSUS_CACHE's)."""

    def __missing__(self, alias: str):
        from flytune_nb.core.targets import TARGETS
        from flytune_nb.engine.census_pool import CensusPool, census_cache_dir

        dev = TARGETS[alias].device()
        with pytest.MonkeyPatch.context() as mp:  # made before a test's _isolated_cache sets it, or inside one
            mp.setenv("FLYTUNE_CENSUS_CACHE", os.environ.get("FLYTUNE_CENSUS_CACHE", str(CENSUS_CACHE)))
            pool = self[alias] = CensusPool(dev, jobs=2, cache_dir=census_cache_dir(dev))
        return pool


@pytest.fixture(scope="package")
def census_pools():
    """The census processes of this folder's tests, one pool per target, shared: each process imports torch and
    Triton (~1.5 s of a core on these 2-core machines, several times that while other jobs run), and the census
    tests here took 12 of them one by one. A pool is given back as it was found: a test may not close it."""
    pools = CensusPools()
    yield pools
    for pool in pools.values():
        pool.close()
