import pytest

import rssm


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test starts with no cached layers, so cache counts are its own."""
    rssm.clear_cache()
    yield
    rssm.clear_cache()
