import pytest

import pvmm


@pytest.fixture
def stream():
    with pvmm.Stream.create(0) as s:
        yield s
