import pytest

from isolation import isolated_home, outside_the_checkout  # noqa: F401 - autouse fixtures


@pytest.fixture(scope="session")
def llvm_target():
    from kb_tvm.measure.targets import make_target

    return make_target({"kind": "llvm", "num-cores": 2})
