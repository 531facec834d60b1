import pytest


@pytest.fixture(scope="session")
def llvm_target():
    from kb_tvm.tuning import make_target

    return make_target({"kind": "llvm", "num-cores": 2})
