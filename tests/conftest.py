import pytest

from isolation import isolated_home, outside_the_checkout  # noqa: F401 - autouse fixtures


@pytest.fixture(scope="session")
def llvm_target():
    from kb_tvm.measure.targets import make_target

    return make_target({"kind": "llvm", "num-cores": 2})


def pytest_sessionstart(session):
    # MetaSchedule's first TuneContext imports TVM's tensor intrinsics (~30 s on a 2-core CPU);
    # kb's entry points register them first (~2 s), and so do the tests that make their own
    from kb_tvm.measure.targets import register_tensor_intrinsics

    register_tensor_intrinsics()
