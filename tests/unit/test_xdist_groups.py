"""The default run relies on `--dist loadgroup`: tests marked with one xdist_group share a worker
(the switched chaos runs their kept checker, the checker tests the clean run's full check). A
pytest/xdist pair that stops grouping would silently make each of them pay for its own."""

import pytest


@pytest.mark.xdist_group("grouping-probe")
def test_a_grouped_test_is_scheduled_by_its_group(request):
    config = request.config
    if config.getvalue("loadgroup"):  # a worker of `--dist loadgroup`: xdist schedules by the id's suffix
        assert request.node.nodeid.endswith("@grouping-probe"), (
            f"node id {request.node.nodeid!r} lost its group: pytest-xdist cannot group with this pytest "
            "(see the pin in pyproject.toml)")
    else:
        assert request.node.get_closest_marker("xdist_group").args == ("grouping-probe",)
