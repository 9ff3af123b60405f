"""Shared set-up of the package's tests (docs/python.md). With SOMA_BACKEND=cuda and no GPU
the run stops at once with exit status 77, which CTest reports as SKIPPED, unless
SOMA_GPU_TESTS_REQUIRE_CUDA=1 (a GPU machine) makes a missing GPU a failure."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_configure(config):
    if os.environ.get("SOMA_BACKEND") != "cuda":
        return
    import soma
    try:
        count = soma.device_count()
    except soma.SomaError as error:
        count, reason = 0, str(error)
    else:
        reason = "no CUDA device"
    if count == 0 and os.environ.get("SOMA_GPU_TESTS_REQUIRE_CUDA") != "1":
        pytest.exit(f"SKIPPED: the cuda backend cannot start here ({reason})", returncode=77)


@pytest.fixture
def stream():
    import soma
    with soma.Stream() as created:
        yield created


@pytest.fixture
def pool():
    """An explicit pool of 64 MiB that keeps nothing at synchronize points."""
    import soma
    created = soma.Pool(max_size=64 << 20, name="pytest")
    yield created
    soma.synchronize()
    created.destroy()


def run_python(code, env=None):
    """Runs code in a fresh python3 (a process whose soma has not started yet)."""
    merged = dict(os.environ)
    merged.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=merged, timeout=120, check=False)


def on_cuda():
    import soma
    return soma.backend() == "cuda"
