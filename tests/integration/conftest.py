import pytest
from support.inprocess import InProcessCluster


@pytest.fixture
def cluster(tmp_path):
    with InProcessCluster(tmp_path) as c:
        yield c
