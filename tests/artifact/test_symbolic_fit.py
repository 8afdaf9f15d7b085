"""The integer polynomials a symbolic ``.fuel`` file's plan fields are
written as (``export_symbolic._Fit``): exact, refused where no polynomial
with integer coefficients goes through the samples' values."""
from compiler.export_symbolic import _Fit
from runtime.symbolic import expression_value


def _fit(names, grid):
    import itertools
    samples = [dict(zip(names, p)) for p in itertools.product(*grid)]
    return _Fit(names, grid, samples), samples


def test_a_quadratic_of_one_symbol_is_fitted_exactly():
    fit, samples = _fit(["n"], [[1, 2, 3]])
    expr = fit.fit([3 * n * n - 2 * n + 7 for n in (1, 2, 3)])
    for n in (1, 2, 3, 7, 1000):
        assert expression_value(expr, {"n": n}) == 3 * n * n - 2 * n + 7


def test_a_product_of_two_symbols():
    fit, samples = _fit(["b", "s"], [[1, 2], [3, 5]])
    expr = fit.fit([4 * b * s + b for b, s in ((1, 3), (1, 5), (2, 3), (2, 5))])
    assert expression_value(expr, {"b": 8, "s": 128}) == 4 * 8 * 128 + 8


def test_values_no_integer_polynomial_fits_are_refused():
    fit, _ = _fit(["n"], [[1, 2, 3]])
    assert fit.fit([1, 2, 4]) is None        # n^2/2 - n/2 + 1: halves
    assert fit.fit([0, 1, 3]) is None        # n(n-1)/2
    assert fit.fit([1, 2, 3]) is not None    # the same fit object fits others after


def test_a_repeated_field_gets_its_own_expression():
    # fits are remembered per values: the second caller must not share the first's object
    fit, _ = _fit(["n"], [[1, 2, 3]])
    a = fit.fit([2, 4, 6])
    a[next(iter(a))].clear()
    b = fit.fit([2, 4, 6])
    assert expression_value(b, {"n": 10}) == 20
