"""Pure-NumPy tables of exact local thickness, shared by the CPU and GPU kernels.

Every length is measured on the *lattice* of :func:`lattice`: the spacing is
``scale * (w0, w1, w2)`` with small integer weights, so the squared length of an
integer offset ``(di, dj, dk)`` is the integer ``(di*w0)**2 + (dj*w1)**2 + (dk*w2)**2``
(held exactly in float64 below 2**53).  Equal lengths therefore compare equal,
and the physical length is ``scale * sqrt(N)`` (docs/definitions.md, "Ties").

No numba, CuPy or edt here.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

# Spacing ratios are snapped to a common denominator L <= LATTICE_MAX_DENOMINATOR ...
LATTICE_MAX_DENOMINATOR = 4096
# ... the smallest L that reproduces every ratio within this relative tolerance.
LATTICE_RTOL = 1e-9
# Where no denominator fits, the nearest lattice is used; local_thickness warns when it is
# farther from the spacing than the float32 output's resolution.
LATTICE_WARN_RTOL = float(np.finfo(np.float32).eps)
# Squared lattice lengths are exact in float64 below this.
EXACT_LIMIT = float(2**53)


# Far pruning (a ball inside a larger ball on its ray from the background) looks at
# centres of radius >= FAR_MIN_RADIUS finest weights (below it, porous phases' walks drop
# few centres and cost more than painting them), and tries points of the ray at c,
# c*FAR_STEP, c*FAR_STEP**2 ... of the farthest in-array one (a farther point contains
# more; a nearer one shares the nearest background more often).
FAR_MIN_RADIUS = 12
# The GPU's threshold, timed on the H200 (its walks run beside the other centres' work).
GPU_FAR_MIN_RADIUS = 8
FAR_STEP = 0.7
# A centre whose central-difference vector u (p - s where its neighbours share their nearest
# background s) has |u|^2 < FAR_RIDGE * D2 sits on a ridge, where the neighbours' nearest
# backgrounds differ: its ray rarely leads to a larger ball and is not walked (fine phases
# keep mostly such centres; the walks skipped on the benchmark's cases pruned nothing).
FAR_RIDGE = 0.75
# Where the continuous containment test fails, far pruning decides exactly by the lattice
# points of a cap of the ball, when its bounding box holds at most this many.
CAP_MAX_POINTS = 256
# The CPU's distance passes search up to this many steps from a voxel before a line takes
# the lower envelope (_numba._group_lines, _group_row; _cpu.pass_type).  Against 32, 48
# made the distance map 1.1-1.4x faster on coarse phases (spheres, the air around a
# cylinder, PoreSpy's blobs at blobiness 1) on 2 cores and 1.07x slower on a solid with
# pores, where the searches give up.
GROUP_SPAN = 48


# The cap test is used where the lattice's squared half-diagonal, sum(w**2) / 4 (what rounding
# a point of the ray to the lattice may cost the continuous test, against its one squared
# unit of slack), exceeds this: on the CPU every lattice but the unit one.  Timed on and off
# in the same run (2 cores): it saves 5-13% on solids with pores at (1, 1, 3) and (1, 1, 4)
# and costs 5-9% on spheres at (1, 1, 3) and on solids at (1, 2, 2) or (2, 2, 3).
CAP_MIN_SLACK = 1.0
# The GPU's threshold.  On an H100 the cap test cost 4-17% at half-diagonals up to 2.75
# ((1, 1, 2), (1, 2, 2), (1, 1, 3)), was even at 4.5 ((1, 1, 4)), and from 34.75
# ((3, 3, 11)) on saved 11-23% on 256^3 solids with pores (and cost 2-3% on spheres and
# blobs at (13, 13, 40)).
GPU_CAP_MIN_SLACK = 8.0


def cap_limit(weights, min_slack=CAP_MIN_SLACK) -> float:
    """Squared radius beyond which a cap's bounding ball surely gives a box of more than
    ``CAP_MAX_POINTS`` lattice points, so that far pruning's cap test gives up before it
    measures the box; -1 where the cap test is not used (``sum(w**2) / 4 <= min_slack``:
    there it finds few more containers than it costs).

    The cap test's box has at least ``2 rho / w + 1`` points along an axis of weight ``w``
    when its bounding ball has radius ``rho >= sqrt(q) + 1`` (``q``: the squared radius
    before padding).  The limit is ``(rho* - 1)**2`` for the smallest ``rho*`` with
    ``prod(2 rho* / w + 1/2) > CAP_MAX_POINTS``: half a point per axis spares rounding.

    Examples
    --------
    >>> cap_limit((1, 1, 1))
    -1.0
    >>> round(cap_limit((13, 13, 40)))
    2874
    >>> cap_limit((1, 1, 3), GPU_CAP_MIN_SLACK)
    -1.0
    """
    if sum(int(w) ** 2 for w in weights) <= 4 * min_slack:
        return -1.0
    return cap_bound(weights)


def cap_bound(weights) -> float:
    """:func:`cap_limit` without its threshold on the half-diagonal."""
    return _cap_bound(tuple(int(v) for v in weights))


@functools.lru_cache(maxsize=64)
def _cap_bound(weights) -> float:
    # A bisection (about 70 us): once per lattice, not per call of the pruning.
    w = [float(v) for v in weights]

    def points(rho):
        return math.prod(2.0 * rho / v + 0.5 for v in w)

    lo, hi = 0.0, 1.0
    while points(hi) <= CAP_MAX_POINTS:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if points(mid) > CAP_MAX_POINTS:
            hi = mid
        else:
            lo = mid
    return max(hi - 1.0, 0.0) ** 2


# On the CPU, centres of radius >= FAR_FIRST_RADIUS finest weights are walked before their 26
# neighbours are read (in a solid with few pores most such walks find a container, and a
# dropped centre then costs no neighbour loop); smaller ones after (on porous phases the
# neighbours drop most of them, and most of their walks find nothing).
FAR_FIRST_RADIUS = 32


def far_min_r2(weights, radius=None) -> float:
    """Smallest squared lattice radius of the centres that far pruning looks at: ``radius``
    (``FAR_MIN_RADIUS`` when None) finest weights.

    Examples
    --------
    >>> far_min_r2((13, 13, 40))
    24336.0
    >>> far_min_r2((1, 1, 1), FAR_FIRST_RADIUS)  # walked before their neighbours from here
    1024.0
    """
    return float(((FAR_MIN_RADIUS if radius is None else radius) * min(weights)) ** 2)


@functools.lru_cache(maxsize=64)
def lattice(spacing) -> tuple[tuple[int, int, int], float]:
    """Integer weights and common scale of a spacing: ``spacing ~= scale * weights``.

    With ``s_min = min(spacing)``, ``L`` is the smallest integer in
    ``1 .. LATTICE_MAX_DENOMINATOR`` such that every ``L * s / s_min`` lies within
    ``LATTICE_RTOL`` (relative) of an integer; the weights are those integers and
    ``scale = s_min / L``.  When no ``L`` qualifies (ratios that are not decimal
    fractions of few digits), the ``L`` with the smallest relative deviation is used:
    the result is then the exact local thickness of a spacing within about
    ``LATTICE_MAX_DENOMINATOR**-1.5`` (relative, per axis) of the one given.

    Examples
    --------
    >>> lattice((0.65, 0.65, 2.0))
    ((13, 13, 40), 0.05)
    >>> lattice((2.0, 2.0, 2.0))
    ((1, 1, 1), 2.0)
    """
    s = [float(v) for v in spacing]
    smin = min(s)
    ratios = [Fraction(v) / Fraction(smin) for v in s]  # exact ratios of the floats
    best = None
    for den in range(1, LATTICE_MAX_DENOMINATOR + 1):
        dev = 0.0
        for r in ratios:
            x = r * den
            dev = max(dev, float(abs(x - round(x)) / x))
        if dev <= LATTICE_RTOL:
            best = (dev, den)
            break
        if best is None or dev < best[0]:
            best = (dev, den)
    den = best[1]
    weights = tuple(int(round(r * den)) for r in ratios)
    return weights, float(Fraction(smin) / den)


def canonical_norms(di, dj, dk, weights) -> np.ndarray:
    """Squared lattice length of integer offsets (float64, exact integers)."""
    wx, wy, wz = (float(w) for w in weights)
    x = np.asarray(di, np.float64) * wx
    y = np.asarray(dj, np.float64) * wy
    z = np.asarray(dk, np.float64) * wz
    return (x * x + y * y) + z * z


# Offsets in a pruning table (one octant of the ball, about pi r^3 / 6) and its distinct
# squared lengths (as many on lattices of large weights, far fewer on small ones); beyond
# either the continuous test is used.
MAX_TABLE_OFFSETS = 2_000_000
MAX_TABLE_LEVELS = 2**18
# Peak host bytes while prune_table builds its largest table (the octant box's squared
# lengths, the offsets and their sort, the needs): 90-113 per offset on four lattices.
PRUNE_TABLE_BUILD_BYTES = 120 * MAX_TABLE_OFFSETS


def offset_table(r2cap: float, weights):
    """Integer offsets of the nonnegative octant with squared length < r2cap, sorted by it
    (stable): (norms, di, dj, dk).  By symmetry they hold every squared length of the ball."""
    r = math.sqrt(r2cap)
    h = [int(r / float(w)) + 1 for w in weights]
    if max(h) > 32767:
        raise ValueError(f"radius {r} too large for an offset table (int16 offsets)")
    ai, aj, ak = (np.arange(0, m + 1, dtype=np.int16) for m in h)
    di, dj, dk = np.meshgrid(ai, aj, ak, indexing="ij")
    norms = canonical_norms(di, dj, dk, weights).ravel()
    sel = np.flatnonzero(norms < r2cap)
    order = sel[np.argsort(norms[sel], kind="stable")]
    return (norms[order], di.ravel()[order].copy(), dj.ravel()[order].copy(),
            dk.ravel()[order].copy())


def _table_cap(r2need: float, weights) -> float:
    """The r2cap of a table for r2need (grown geometrically), bounded by MAX_TABLE_OFFSETS."""
    vox = float(np.prod([float(w) for w in weights]))
    # an octant of the ball: (4/3) pi r^3 / 8 lattice points of volume vox
    rmax_allowed = (MAX_TABLE_OFFSETS * vox * 8 * 3 / (4 * math.pi)) ** (1 / 3)
    cap = max(2.0 * r2need, 16.0 * max(float(w) for w in weights) ** 2)
    return min(cap, rmax_allowed ** 2)


_PRUNE_TABLES: dict = {}
_LEVEL_LUTS: dict = {}
# Level lookup tables hold one int64 per integer squared length below this (8 MiB); the
# prune kernel searches the levels of longer ones.  A table per squared length up to the
# pruning cap (up to 2**24 on lattices of large weights) took 0.7-1.5 s to build, in every
# process, for a search that costs a few steps per centre.
LEVEL_LUT_MAX = 2**20


def level_lut(levels, r2cap, weights) -> np.ndarray:
    """lut[v] = index of the largest level < v for the integers v < min(r2cap,
    LEVEL_LUT_MAX): the prune kernel's level lookup without a binary search.

    Examples
    --------
    >>> level_lut(np.array([0.0, 1.0, 2.0, 4.0]), 6.0, (1, 1, 1)).tolist()
    [-1, 0, 1, 2, 2, 3]
    """
    key = (tuple(int(w) for w in weights), float(r2cap), levels.size)
    lut = _LEVEL_LUTS.get(key)
    if lut is None:
        n = int(math.floor(r2cap))
        if n >= r2cap:
            n -= 1
        n = min(n, LEVEL_LUT_MAX - 1)
        # lut[v] = (how many levels are < v) - 1, by counting (levels are exact integers)
        present = np.zeros(n + 1, np.int64)
        present[levels[levels <= n].astype(np.int64)] = 1
        lut = np.empty(n + 1, np.int64)
        lut[0] = -1
        np.cumsum(present[:-1], out=lut[1:])
        lut[1:] -= 1
        _LEVEL_LUTS.clear()
        _LEVEL_LUTS[key] = lut
    return lut


# held_table's columns: the neighbours' squared distances it covers (3.5 MiB of float64
# for its 7 rows); a centre with a larger neighbour takes the per-neighbour test.
HELD_TABLE_MAX = 2**16
_HELD_TABLES: dict = {}


def held_table(levels, need, levlut, r2need: float) -> np.ndarray:
    """held[e, b] = the largest integer a < levlut.size whose ball a neighbour of type e
    and squared distance b holds (``need[e, levlut[a]] < b``), 0 if none; b below
    ``min(r2need + 1, HELD_TABLE_MAX)``.

    Containment grows with b and shrinks with a, so a neighbour holds the ball of ``a``
    iff ``a <= held[e, b]``, and a set of neighbours of one type holds it iff ``a <=
    held[e, max b]``: the prune kernel tests a centre's 26 neighbours as lookups of
    their types' largest D2 (3 where the weights are equal, else 7).  Empty (0 columns)
    when r2need is not finite.

    Examples
    --------
    >>> levels, need, _ = prune_table(9.0, (1, 1, 1))
    >>> lut = level_lut(levels, 10.0, (1, 1, 1))
    >>> held_table(levels, need, lut, 9.0)[0].astype(int).tolist()  # face neighbours
    [0, 0, 1, 1, 1, 2, 3, 4, 4, 4]
    """
    if not math.isfinite(r2need):
        return np.zeros((7, 0), np.float64)
    nb = int(min(r2need + 1.0, HELD_TABLE_MAX))
    key = (id(levlut), levlut.size, need.shape, nb)
    t = _HELD_TABLES.get(key)
    if t is None or t[0] is not levlut:
        b = np.arange(nb, dtype=np.float64)
        held = np.empty((7, nb), np.float64)
        for e in range(7):
            top = np.searchsorted(need[e], b, side="left") - 1  # largest level: need < b
            held[e] = np.searchsorted(levlut, top, side="right") - 1
        _HELD_TABLES.clear()
        t = _HELD_TABLES[key] = (levlut, held)
    return t[1]


def prune_table(r2need: float, weights):
    """(levels, need, r2cap): distinct squared lengths < r2cap and, for each of the 7
    neighbour types e = (|di|, |dj|, |dk|) (index 4|di| + 2|dj| + |dk| - 1),
    need[e, l] = max |o + e|^2 over the offsets o with |o|^2 <= levels[l].  Cached per
    weights; grows when needed."""
    key = tuple(int(w) for w in weights)
    t = _PRUNE_TABLES.get(key)
    if t is not None and (t[2] > r2need or t[3]):
        return t[:3]
    cap = _table_cap(r2need, key)
    norms, di, dj, dk = offset_table(cap, key)
    levels, first = np.unique(norms, return_index=True)
    if levels.size > MAX_TABLE_LEVELS:  # cut before a squared length (balls stay whole)
        cap = float(levels[MAX_TABLE_LEVELS])
        n = int(first[MAX_TABLE_LEVELS])
        levels, first = levels[:MAX_TABLE_LEVELS], first[:MAX_TABLE_LEVELS]
        norms, di, dj, dk = norms[:n], di[:n], dj[:n], dk[:n]
    last = np.r_[first[1:], norms.size] - 1
    need = np.empty((7, levels.size), np.float64)
    adi, adj, adk = (v.astype(np.int64) for v in (di, dj, dk))  # the octant: |o| = o
    for e in range(1, 8):
        ei, ej, ek = (e >> 2) & 1, (e >> 1) & 1, e & 1
        m = canonical_norms(adi + ei, adj + ej, adk + ek, key)
        need[e - 1] = np.maximum.accumulate(m)[last]
    saturated = cap < max(2.0 * r2need, 16.0 * max(key) ** 2)  # at its bounds: not regrown
    _PRUNE_TABLES[key] = (levels, need, cap, saturated)
    return levels, need, cap


# Integer painting tables (indexed by squared length) are used up to this squared radius.
INT_TABLE_MAX = 2**20


def _quarter_extent(r2max: int, wy: int, wz: int, extent=None) -> tuple[int, int]:
    """Offsets per axis of the quarter disc up to r2max: its bounding rectangle, clipped to
    ``extent`` (the array's lengths along axes 1 and 2; no offset reaches farther)."""
    qa = math.isqrt(r2max) // wy + 2
    qb = math.isqrt(r2max) // wz + 2
    if extent is not None:
        qa, qb = min(qa, int(extent[0])), min(qb, int(extent[1]))
    return qa, qb


@functools.lru_cache(maxsize=8)
def _quarter_disc(r2max: int, wy: int, wz: int, extent=None) -> tuple[np.ndarray, np.ndarray]:
    """The squared lengths (ascending) of the offsets o >= 0 of a plane's quarter disc up to
    r2max (within ``extent``), and per row t = |ey|*3 + |ek| (t < 5) the running max of
    |o + (ey, ek)|^2."""
    qa, qb = _quarter_extent(r2max, wy, wz, extent)
    a, b = np.meshgrid(np.arange(qa, dtype=np.int64), np.arange(qb, dtype=np.int64),
                       indexing="ij")
    norm = ((a * wy) ** 2 + (b * wz) ** 2).ravel()
    order = np.argsort(norm, kind="stable")
    norm = norm[order]
    a = a.ravel()[order]
    b = b.ravel()[order]
    pm = np.zeros((5, norm.size), np.int64)
    for ey in range(2):
        for ek in range(2):
            pm[ey * 3 + ek] = np.maximum.accumulate(((a + ey) * wy) ** 2 + ((b + ek) * wz) ** 2)
    return norm, pm


def table_length(r2max: int) -> int:
    """Columns of a table indexed by squared length that holds ``0 .. r2max``: ``r2max + 1``
    rounded up to a power of two, at most ``INT_TABLE_MAX`` (unless more are asked), so
    that calls with nearby largest radii share one cached table.

    Examples
    --------
    >>> table_length(0), table_length(1000), table_length(1024), table_length(2**20 - 1)
    (2, 1024, 2048, 1048576)
    """
    r2max = int(r2max)
    return max(r2max + 1, min(1 << max(r2max, 1).bit_length(), INT_TABLE_MAX))


@functools.lru_cache(maxsize=2)  # up to 75 MB each: the last two lattices or lengths
def _disc_need(r2max: int, wy: int, wz: int) -> np.ndarray:
    norm, pm = _quarter_disc(r2max, wy, wz)
    # count[rho] = how many sorted norms are < rho (the disc of rho, one quadrant)
    count = np.searchsorted(norm, np.arange(r2max + 1, dtype=np.int64), side="left")
    need = np.zeros((9, r2max + 1), np.int64)
    for t in (0, 1, 3, 4):
        row = np.where(count > 0, pm[t][np.maximum(count - 1, 0)], 0)
        row[0] = 0
        need[t] = row
    return need


def disc_need_table(r2max: int, wy: int, wz: int) -> np.ndarray:
    """need[|ey|*3 + |ek|, rho] = max of |o + (ey, ek)|^2 over the disc
    {o : (o_y*wy)^2 + (o_z*wz)^2 < rho}: that disc shifted by (ey, ek) lies inside the
    disc of rho' iff rho' > need.  (The first axis has 9 rows; 0, 1, 3, 4 are used.)

    Cached; its columns ``0 .. table_length(r2max) - 1`` (at least ``r2max + 1``): a
    column does not depend on the table's length."""
    return _disc_need(table_length(r2max) - 1, int(wy), int(wz))


def disc_need_far(r2max: int, wy: int, wz: int, extent=None) -> np.ndarray:
    """``disc_need_table`` without a column per squared radius, for radii beyond the
    tables: rows 0-4 hold the running maxima of the quarter disc's offsets in ascending
    length, row 5 those lengths, and ``need[t, rho] = far[t, c - 1]`` where c counts the
    lengths < rho (rho >= 1).  One column per lattice offset of a quarter disc (about
    r2max / (wy * wz)) where the table has one per squared length.

    ``extent``: the array's lengths ``(n1, n2)`` along axes 1 and 2.  Offsets of ``n1`` or
    more along axis 1 (``n2`` along axis 2) reach no voxel from any centre, so the table
    keeps only those below: the needs are those of the discs' parts inside the array, and a
    thin array gets a small table whatever its largest ball.

    Examples
    --------
    >>> far = disc_need_far(50, 1, 1)
    >>> c = int(np.searchsorted(far[5], 26))
    >>> int(far[0, c - 1]) == int(disc_need_table(50, 1, 1)[0, 26]) == 25
    True
    """
    if extent is not None:
        extent = (int(extent[0]), int(extent[1]))
    norm, pm = _quarter_disc(int(r2max), int(wy), int(wz), extent)
    return np.concatenate([pm, norm[None]])


def far_buckets(lengths) -> np.ndarray:
    """A bucket index of ``disc_need_far``'s lengths (its row 5, ascending) for the kernels'
    lookups past the tables: ``idx[b]`` counts the lengths ``< b << s`` for
    ``b < idx.size - 1``, and ``idx[-1] = s``, the smallest shift that leaves fewer buckets
    than lengths.  A quarter disc's lengths are about evenly spread (their count grows
    with the squared length), so a lookup scans under one column on average from its
    bucket where a binary search takes a dozen steps.

    Examples
    --------
    >>> far = disc_need_far(5000, 1, 1)
    >>> idx = far_buckets(far[5])
    >>> s, rho = int(idx[-1]), 2718
    >>> c = int(idx[rho >> s])
    >>> while far[5, c] < rho:
    ...     c += 1
    >>> c == int(np.searchsorted(far[5], rho))
    True
    """
    lengths = np.asarray(lengths)
    n = lengths.size
    shift = 0
    while n > 1 and int(lengths[-1]) >> shift >= n - 1:
        shift += 1
    idx = np.searchsorted(lengths, np.arange(n, dtype=np.int64) << shift).astype(np.int64)
    idx[-1] = shift
    return idx


def with_far_buckets(far: np.ndarray) -> np.ndarray:
    """``disc_need_far``'s rows with ``far_buckets`` of its lengths as row 7 (index 6), as
    the CPU and GPU kernels read them.

    Examples
    --------
    >>> with_far_buckets(disc_need_far(5000, 1, 1)).shape[0]
    7
    """
    return np.vstack([far, far_buckets(far[5])])


def far_columns(shape, weights) -> int:
    """Columns of the ``disc_need_far`` that a call on a ``shape`` block may build, for
    any phase (0 when every squared radius it can meet is within the integer tables).

    The largest squared distance between two voxels of the block bounds the squared
    radius; ``_quarter_disc`` holds one column per offset of its bounding rectangle,
    clipped to the block's lengths along axes 1 and 2.

    Examples
    --------
    >>> far_columns((64, 64, 64), (1, 1, 1))
    0
    >>> far_columns((64, 64, 64), (13, 13, 40)) > 0
    True
    """
    r2 = sum(((int(n) - 1) * int(w)) ** 2 for n, w in zip(shape, weights))
    if r2 < INT_TABLE_MAX:
        return 0
    qa, qb = _quarter_extent(r2, int(weights[1]), int(weights[2]), shape[1:])
    return qa * qb


def half_table(r2max: int, w: int) -> np.ndarray:
    """hw[B] = the largest h >= 0 with (h*w)^2 < B for 1 <= B <= r2max, hw[0] = -1 (int64).

    A view of a cached table (its length rounded up to a power of two): the painters read
    it, and must not write it.

    Examples
    --------
    >>> half_table(10, 2).tolist()  # (2h)^2 < B
    [-1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    """
    r2max = int(r2max)
    return _half_table(table_length(r2max), int(w))[: r2max + 1]


@functools.lru_cache(maxsize=8)  # a call reads at most four (its lattice's weights)
def _half_table(size: int, w: int) -> np.ndarray:
    b = np.arange(size, dtype=np.int64)
    q = np.maximum(b - 1, 0) // (w * w)  # (h*w)^2 < B  <=>  h^2 <= (B - 1) // w^2
    h = np.floor(np.sqrt(q.astype(np.float64))).astype(np.int64)
    h += (h + 1) * (h + 1) <= q
    h -= h * h > q
    h[0] = -1
    return h


def diameter_lut(values: np.ndarray, scale: float, xp=np) -> "np.ndarray":
    """Diameters of squared lattice radii: ``float32(2*sqrt(v)) * float32(scale)``, the
    product rounded in float32, with 0 prepended (rank 0 = not covered).

    The scale is applied last, in float32, so ``LT(X, s*spacing) == s * LT(X, spacing)``
    holds bit for bit in float32 whenever both spacings share their weights.
    """
    lut = xp.zeros(values.size + 1, np.float32)
    lut[1:] = (2.0 * xp.sqrt(values)).astype(np.float32) * np.float32(scale)
    return lut
