"""Shared fixtures of the CUDA target tests: ``gpu`` tests skip cleanly
without cuda-python and a device; ptxas checks skip without ptxas."""
import pytest


def pytest_collection_modifyitems(config, items):
    gpu_items = [i for i in items if i.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import runtime.cuda
    if runtime.cuda.available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and cuda-python (runtime.cuda.available())")
    for item in gpu_items:
        item.add_marker(skip)
