"""``compiler.testing.same_bits_at_threads`` and ``parallel.threads``."""
import numpy as np
import pytest

from compiler.codegen import parallel
from compiler.testing import same_bits_at_threads


def test_returns_the_first_result_when_every_count_agrees():
    seen = []

    def run():
        seen.append(parallel.num_threads())
        return [np.arange(3.0), np.ones(2)]

    out = same_bits_at_threads(run, counts=(1, 2, 3))
    assert seen == [1, 2, 3]
    np.testing.assert_array_equal(out[0], np.arange(3.0))


def test_a_result_that_depends_on_the_thread_count_fails():
    with pytest.raises(AssertionError, match="2 threads against 1"):
        same_bits_at_threads(lambda: np.array([1.0, parallel.num_threads() * 1e-7 + 1.0]))
    with pytest.raises(AssertionError, match="results"):
        same_bits_at_threads(lambda: [np.zeros(1)] * parallel.num_threads())


def test_threads_restores_the_setting_before():
    parallel.set_num_threads(3)
    try:
        with parallel.threads(1):
            assert parallel.num_threads() == 1
            with pytest.raises(RuntimeError):
                with parallel.threads(2):
                    assert parallel.num_threads() == 2
                    raise RuntimeError
            assert parallel.num_threads() == 1
        assert parallel.num_threads() == 3
    finally:
        parallel.set_num_threads(None)
