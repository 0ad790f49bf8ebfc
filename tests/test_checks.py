"""The one rule for lists of numbers in every file goggles reads."""

import numpy as np
import pytest

from goggles.checks import finite_vector


def test_accepts_a_list_of_ints_and_floats():
    np.testing.assert_array_equal(finite_vector([1, 2.5, -3], 3), [1.0, 2.5, -3.0])


@pytest.mark.parametrize(
    "value",
    [
        None,
        "1,2,3",
        [1, 2],
        [1, 2, 3, 4],
        [1, float("nan"), 3],
        [1, float("inf"), 3],
        ["1", "2", "3"],
        [True, False, True],
        [[1], [2], [3]],
        {"x": 1},
    ],
)
def test_rejects_anything_else(value):
    assert finite_vector(value, 3) is None
