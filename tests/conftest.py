import os
import tempfile

import pytest


@pytest.fixture(scope="session")
def llvm_target():
    from kb_tvm.tuning import make_target

    return make_target({"kind": "llvm", "num-cores": 2})


# tune commands keep experience in the user cache by default: never the real one in tests
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="kb-tests-cache-")
