"""The benchmarks' pure parts, without a GPU: the sweep's shape grid and its summary."""

from gpumat._bench.common import geometric_mean
from gpumat._bench.sweep import grid


def test_the_sweep_grid_covers_every_class_once_per_shape():
    cases = grid()
    assert len(cases) == len(set(cases)) and 80 <= len(cases) <= 110
    classes = {c for c, *_ in cases}
    assert classes == {"square", "skinny M", "skinny N", "long K", "short K", "transformer", "odd"}
    assert all(m >= 1 and n >= 1 and k >= 1 for _, m, n, k in cases)
    squares = {m for c, m, n, k in cases if c == "square"}
    assert {128, 8192, 4095, 4097} <= squares  # powers of two and odd sizes either side
    assert {m for c, m, *_ in cases if c == "skinny M"} == {1, 8, 16, 32, 64, 128, 256}


def test_geometric_mean_of_ratios():
    assert geometric_mean([1.0, 4.0]) == 2.0
    assert abs(geometric_mean([0.5, 2.0, 1.0]) - 1.0) < 1e-12
    assert geometric_mean([]) is None
