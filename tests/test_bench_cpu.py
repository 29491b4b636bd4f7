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


def test_the_transpose_sweep_covers_every_width_class_and_size_in_every_dtype():
    from gpumat._bench import transpose

    for itemsize in (2, 4, 8):
        cases = transpose.shapes(itemsize)
        narrow_cols = {c for kind, r, c in cases if kind == "narrow columns"}
        narrow_rows = {r for kind, r, c in cases if kind == "narrow rows"}
        assert narrow_cols == narrow_rows == set(transpose.WIDTHS)
        assert {1, 2, 17, 31, 37, 127, 128} <= narrow_cols  # one, odd, and the tile size +-1
        strips = [r * c * itemsize for kind, r, c in cases if kind.startswith("narrow")]
        assert all(transpose.STRIP_BYTES - 128 * itemsize <= b <= transpose.STRIP_BYTES for b in strips)
        squares = [r * c * itemsize for kind, r, c in cases if kind == "square"]
        assert min(squares) <= 1 << 20 and max(squares) > 3 << 30  # 1 MiB to 4 GiB
        assert ("odd", 3001, 17011) in cases


def test_the_dot_sweep_runs_from_2_to_the_10_to_2_to_the_28():
    from gpumat._bench import dot

    assert dot.POWERS[0] == 10 and dot.POWERS[-1] == 28
    for p in dot.POWERS:
        rows, cols = dot._shape(1 << p)
        assert rows * cols == 1 << p and rows <= cols
