"""Exact local thickness on the CPU: oracle equality, chunks, phase selection,
distribution and errors.  GPU comparisons live in test_thickness_gpu.py."""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from thickness_oracle import (oracle_d2_int, oracle_local_thickness,  # noqa: E402
                              oracle_r2_int)
from tests_data import solid_with_pores  # noqa: E402

import volsweep  # noqa: E402
from volsweep import thickness as T  # noqa: E402
from volsweep.thickness import _cpu as CPU  # noqa: E402
from volsweep.thickness import _numba as NB  # noqa: E402
from volsweep.thickness import _tables as TAB  # noqa: E402
from volsweep.tiling import plan_tiles  # noqa: E402


def blobs(shape, porosity=0.5, sigma=2.0, seed=0):
    from scipy import ndimage as ndi

    g = ndi.gaussian_filter(np.random.default_rng(seed).random(shape), sigma)
    return g > np.quantile(g, 1 - porosity)


def _columns(phase):
    """prune's per-task containers of the row before (one plane's columns per task)."""
    return np.zeros((phase.shape[0], phase.shape[2], 3), np.int32)


def _prune_mask(d2, weights, lo=(0, 0, 0), hi=None, r2keep=np.inf, *, levlut=None,
                holds=None, r2min=np.inf, r2first=np.inf):
    """The prune kernel's mask over the whole array in one task (no far pruning by
    default); ``holds``: its table of neighbours' largest D2 (None: the full one)."""
    hi = d2.shape if hi is None else hi
    r2need = float(d2[np.isfinite(d2)].max())
    levels, need, r2cap = TAB.prune_table(r2need, weights)
    if levlut is None:
        levlut = TAB.level_lut(levels, r2cap, weights)
    if holds is None:
        holds = TAB.held_table(levels, need, levlut, r2need)
    mask = np.empty(d2.shape, np.uint8)
    CPU._kernels().prune(d2, *(float(w) for w in weights), 0.0, *lo, *hi, r2keep, levels,
                         need, r2cap, levlut, holds, r2min, r2first, TAB.FAR_STEP,
                         TAB.FAR_RIDGE, TAB.cap_limit(weights), _columns(d2),
                         np.zeros((d2.shape[0], CPU._PRUNE_ROWS, d2.shape[2])), mask,
                         np.empty(d2.shape, np.uint16), 0, d2.shape[0])
    return mask


def random_phase(shape, seed, p=0.3):
    return np.random.default_rng(seed).random(shape) > p


# ----------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("spacing", [(1, 1, 1), (1, 2, 3), (3, 1, 2)])
@pytest.mark.parametrize("shape,seed", [((17, 23, 11), 0), ((9, 14, 20), 1), ((1, 30, 25), 2)])
def test_identical_to_oracle_integer_spacing(shape, seed, spacing):
    for phase in (random_phase(shape, seed), blobs(shape, sigma=2.0, seed=seed)):
        got = volsweep.local_thickness(phase, spacing=spacing)
        assert got.dtype == np.float32 and got.shape == phase.shape
        np.testing.assert_array_equal(got, oracle_local_thickness(phase, spacing))


# Spacings whose lengths are not representable in binary (0.65, 0.3, 0.7 ...): ties must
# still be decided exactly.
NON_INTEGER_SPACINGS = [(0.65, 0.65, 0.65), (0.65, 0.65, 2.0), (0.7, 1.3, 1.0), (0.3, 0.3, 0.3),
                        (0.7, 1.1, 1.3), (0.5, 0.25, 0.8), (1.3, 0.9, 1.0)]


def ball_with_a_dent():
    g = np.mgrid[:13, :13, :13] - 6
    phase = (g ** 2).sum(0) <= 25
    phase[2, 3, 6] = False
    return phase


def assert_exact(phase, spacing, device="cpu"):
    """N (ours) and R2 (exact oracle) are proportional with one constant, and the
    float32 output is the oracle's."""
    n, weights, scale = T._squared_radius(phase, spacing=spacing, device=device)
    r2, w_ref, unit = oracle_r2_int(phase, spacing)
    # both lattices are the spacing's integer ratios: the same up to a common factor
    f = w_ref[0] / weights[0]
    assert all(a * f == b for a, b in zip(weights, w_ref)), (weights, w_ref)
    n = n.astype(np.int64)
    assert (n * round(f * f) == r2).all(), int((n * round(f * f) != r2).sum())
    got = T.local_thickness(phase, spacing=spacing, device=device)
    np.testing.assert_array_equal(got, oracle_local_thickness(phase, spacing))


@pytest.mark.parametrize("spacing", NON_INTEGER_SPACINGS + [(1, 1, 1), (2, 3, 1)])
def test_exact_at_any_spacing(spacing):
    for phase in (random_phase((12, 15, 10), 3), blobs((14, 11, 16), sigma=2, seed=4),
                  ball_with_a_dent()):
        assert_exact(phase, spacing)


def test_reproducer_ball_with_removed_voxel():
    # At spacing 0.65 the float comparison of non-representable lengths let the ball of
    # D2 = 0.65^2 * 25 reach (1, 6, 6); exactly, |x - p|^2 == D2 there (a tie, excluded).
    phase = ball_with_a_dent()
    lt = T.local_thickness(phase, spacing=(0.65,) * 3)
    assert lt[1, 6, 6] == np.float32(2 * np.sqrt(17)) * np.float32(0.65)
    assert T.local_thickness(phase)[1, 6, 6] == np.float32(2 * np.sqrt(17))
    assert_exact(phase, (0.65,) * 3)


@pytest.mark.parametrize("s", [0.3, 0.65, 0.7, 1.1])
def test_exact_scale_invariance(s):
    for phase in (ball_with_a_dent(), blobs((19, 14, 17), sigma=2, seed=9)):
        base = T.local_thickness(phase)
        np.testing.assert_array_equal(T.local_thickness(phase, spacing=(s, s, s)), s * base)
        aniso = T.local_thickness(phase, spacing=(13, 13, 40))
        sp = tuple(s * 0.05 * w for w in (13, 13, 40))
        np.testing.assert_array_equal(T.local_thickness(phase, spacing=sp),
                                      np.float32(s * 0.05) * aniso)
        assert T.max_inscribed_radius(phase, spacing=(s, s, s)) == pytest.approx(
            s * T.max_inscribed_radius(phase), rel=1e-15)


def test_lattice_of_spacings():
    assert TAB.lattice((0.65, 0.65, 2.0)) == ((13, 13, 40), 0.05)
    assert TAB.lattice((0.7, 1.3, 1.0))[0] == (7, 13, 10)
    assert TAB.lattice((2.0, 4.0, 6.0)) == ((1, 2, 3), 2.0)
    assert TAB.lattice((0.3, 0.3, 0.3)) == ((1, 1, 1), 0.3)
    # irrational ratio: snapped within LATTICE_MAX_DENOMINATOR ** -1.5 (relative)
    w, scale = TAB.lattice((1.0, math.pi, 1.0))
    assert abs(scale * w[1] / (scale * w[0]) - math.pi) / math.pi < TAB.LATTICE_MAX_DENOMINATOR ** -1.5
    assert max(w) <= math.pi * TAB.LATTICE_MAX_DENOMINATOR + 1


def test_lattice_too_fine_for_the_shape_raises():
    w, _ = TAB.lattice((1.0, math.pi, 1.0))
    n = int(math.sqrt(TAB.EXACT_LIMIT) / max(w)) + 1
    with pytest.raises(ValueError, match="2\\*\\*53"):
        T._lattice((1.0, math.pi, 1.0), (1, n, 1))


@pytest.mark.parametrize("spacing,warns", [((0.123457, 0.3, 0.71), True),
                                            ((0.6523, 0.6523, 2.0), False),
                                            ((0.5137, 0.5137, 0.7), False)])
def test_spacing_without_small_ratios_is_exact_for_the_nearest_lattice(spacing, warns, recwarn):
    # ratios with no denominator <= 4096: the nearest lattice is used, and said when it is
    # farther from the spacing than float32 resolves
    phase = blobs((13, 10, 15), sigma=2, seed=6)
    got = T.local_thickness(phase, spacing=spacing)
    said = [w for w in recwarn if "nearest such spacing" in str(w.message)]
    assert len(said) == int(warns)
    weights, scale = TAB.lattice(spacing)
    used = np.array(weights) * scale
    off = (np.abs(used - spacing) / spacing).max()
    assert (off > TAB.LATTICE_WARN_RTOL) == warns
    np.testing.assert_array_equal(
        got, oracle_local_thickness(phase, weights) * np.float32(scale))
    # and close to the brute force at the decimal spacing given
    np.testing.assert_allclose(got, oracle_local_thickness(phase, spacing), rtol=4 * max(
        off, TAB.LATTICE_WARN_RTOL))


def test_spacing_with_small_ratios_does_not_warn(recwarn):
    phase = blobs((9, 8, 7), sigma=2, seed=1)
    for spacing in [(0.65, 0.65, 2.0), (0.347, 0.347, 1.0), (2.79, 2.39, 2.39), (1, 1, 1),
                    (float(np.float32(0.325)), float(np.float32(0.325)), 1.0)]:
        T.local_thickness(phase, spacing=spacing)
    assert not [w for w in recwarn if "nearest such spacing" in str(w.message)]


def test_distance_map_method_checked_first():
    # named in the error, before any work, whatever the phase (an all-phase array returns
    # early)
    for phase in (np.ones((3, 4, 5), bool), blobs((6, 5, 7), sigma=1, seed=2)):
        with pytest.raises(ValueError, match="method='scipy'"):
            CPU.edt_sq(phase, (1, 1, 1), method="scipy")


@pytest.fixture(params=["float32 where exact", "float64"])
def pass_type(request, monkeypatch):
    # The distance map between its passes: the default (float32 at these sizes), then
    # float64 as for volumes whose squared lengths reach 2**24 (_cpu.pass_type).
    if request.param == "float64":
        monkeypatch.setattr(CPU, "pass_type", lambda shape, weights: np.float64)
    return request.param


def test_distance_maps_equal_oracle(pass_type):
    phase = blobs((15, 12, 18), sigma=2, seed=5)
    for spacing in [(1, 1, 1), (2, 1, 3), (0.7, 1.1, 1.3), (0.65, 0.65, 2.0)]:
        ref, w, _ = oracle_d2_int(phase, spacing)
        weights, _ = TAB.lattice(spacing)
        assert weights == w
        np.testing.assert_array_equal(CPU.edt_sq(phase, weights, method="edt"), ref)
        np.testing.assert_array_equal(CPU.edt_sq(phase, weights, method="numba"), ref)



def test_distance_maps_equal_oracle_on_long_and_grouped_lines(pass_type):
    # Axes 1 and 2 are searched NB.GROUP_LINES lines and NB.ROW_GROUP voxels of a row at a
    # time for up to NB.GROUP_SPAN steps: a fine part (groups that finish), a solid part
    # with a few background voxels (groups that need more steps and take the per-line
    # pass, lines along axis 0 without any background) and widths that are not multiples of
    # the group; then the same phase with axes 1 and 2 swapped.  Oracle: scipy's distance
    # transform, squared and rounded (exact integers at these lengths; the brute force of
    # the other tests is too slow at this size).
    from scipy import ndimage

    rng = np.random.default_rng(11)
    shape = (9, 2 * NB.GROUP_SPAN + 7, NB.GROUP_LINES * 2 + 5)
    phase = np.ones(shape, bool)
    phase[:, :, :NB.GROUP_LINES] = rng.random((9, shape[1], NB.GROUP_LINES)) < 0.7
    phase[0, :, :NB.GROUP_LINES] = False
    phase[4, 1, -3] = phase[0, -2, -1] = False
    for swap in (False, True):
        x = np.ascontiguousarray(phase.transpose(0, 2, 1)) if swap else phase
        fine = (slice(None), slice(0, NB.GROUP_LINES)) if swap else (
            slice(None), slice(None), slice(0, NB.GROUP_LINES))
        for spacing in [(1, 1, 1), (2, 1, 3), (0.65, 0.65, 2.0)]:
            w, _ = TAB.lattice(spacing)
            ref = np.rint(ndimage.distance_transform_edt(x, sampling=w) ** 2)
            np.testing.assert_array_equal(CPU.edt_sq(x, w), ref)
            # groups that finish, and groups that hand over: lines of the searched axis
            # without a finite value after axis 0, longer than 2 GROUP_SPAN + 1 steps
            assert ref[fine].max() < (NB.GROUP_SPAN * min(w[1:])) ** 2
            assert x.all(axis=(0, 2) if swap else (0, 1)).any()
            assert x.shape[2 if swap else 1] > 2 * NB.GROUP_SPAN + 1 and np.isfinite(ref).all()


def test_distance_map_between_passes_exact_up_to_float32s_limit():
    # Squared lengths between the passes up to just below 2**24 stay in float32 and exact
    # (here 3 * 1365 along axis 0 and 90 along axis 1: 2**24 - 91); one row more along
    # axis 1, or axis-1 step terms of 49 * 125, and the passes take float64 (axis 2's
    # searches run in float64 whatever its weight).
    from scipy import ndimage

    weights = (1365, 1, 1)
    shape = (4, 91, 40)
    assert (3 * 1365) ** 2 + 90**2 == 2**24 - 91
    assert CPU.pass_type(shape, weights) is np.float32
    assert CPU.pass_type((4, 92, 40), weights) is np.float64
    assert CPU.pass_type((8, 8, 8), (1, 125, 1)) is np.float64
    assert CPU.pass_type((8, 8, 8), (1, 1, 125)) is np.float32
    phase = np.ones(shape, bool)
    phase[0, 0, 0] = phase[0, 0, 7] = False
    ref = np.rint(ndimage.distance_transform_edt(phase, sampling=weights) ** 2)
    assert ref[3, 90, 7] == 2**24 - 91 and ref.max() > 2**24
    np.testing.assert_array_equal(CPU.edt_sq(phase, weights), ref)


@pytest.mark.parametrize("spacing", [(1, 1, 1), (3, 2, 1)])
def test_distance_map_rows_after_rows_that_need_more_steps(spacing, pass_type):
    # A row whose search along axis 2 needs more than NB.GROUP_SPAN steps takes the
    # per-line pass, and so do the NB.GROUP_SKIP rows after it; the rows after those are
    # searched again.  Here the rows near a solid band's far side need more steps and the
    # others not.  Oracle: scipy's distance transform, squared and rounded.
    from scipy import ndimage

    rng = np.random.default_rng(5)
    shape = (6, NB.GROUP_SKIP + 3 * NB.GROUP_SPAN, 2 * NB.ROW_GROUP + 9)
    phase = rng.random(shape) < 0.7
    band = NB.GROUP_SPAN + 8
    phase[:, :band] = True
    w, _ = TAB.lattice(spacing)
    ref = np.rint(ndimage.distance_transform_edt(phase, sampling=w) ** 2)
    np.testing.assert_array_equal(CPU.edt_sq(phase, w), ref)
    # row 0 needs more steps than the search takes, the rows past the skipped ones not
    assert ref[:, 0].min() > (NB.GROUP_SPAN * w[2]) ** 2
    assert ref[:, NB.GROUP_SKIP + 1:].max() < (NB.GROUP_SPAN * min(w[1:])) ** 2


def test_known_shapes():
    # A 5-voxel-thick slab (axis 0), infinite along the others: D at its middle is 3,
    # so every slab voxel is covered by a ball of diameter 6.
    phase = np.zeros((9, 8, 8), bool)
    phase[2:7] = True
    lt = T.local_thickness(phase)
    assert np.all(lt[2:7] == 6.0) and np.all(lt[:2] == 0) and np.all(lt[7:] == 0)
    # Same with spacing 2 along axis 0: diameters double.
    assert np.all(T.local_thickness(phase, spacing=(2, 1, 1))[2:7] == 12.0)
    # Empty phase: zeros.
    assert not T.local_thickness(np.zeros((4, 5, 6), bool)).any()
    # One isolated voxel: D = 1, LT = 2.
    one = np.zeros((5, 5, 5), bool)
    one[2, 2, 2] = True
    assert T.local_thickness(one)[2, 2, 2] == 2.0


def test_nearest_free_bit_is_the_closest_set_bit():
    # _nearest_free(free, x): min |x - b| over the set bits b of free, x inside the word,
    # on its edges or beyond them (the painter's centre column may lie in another word).
    K = CPU._kernels()
    rng = np.random.default_rng(5)
    for trial in range(4000):
        nbits = int(rng.integers(1, 5)) if trial % 2 else int(rng.integers(1, 64))
        pos = rng.choice(64, nbits, replace=False)
        free = np.uint64(sum(1 << int(b) for b in pos))
        x = int(rng.integers(-80, 150))
        assert K._nearest_free(free, x) == min(abs(x - int(b)) for b in pos), (pos, x)


def _balls_and_masks(seed, n=300):
    """Random balls (centre plane, half extent up to 35: two mask words) and disc masks,
    some balls wholly hidden."""
    rng = np.random.default_rng(seed)
    ci = rng.integers(-10, 50, n)
    ext = rng.integers(-1, 36, n)
    moff = np.zeros(n + 1, np.int64)
    np.cumsum((2 * ext + 64) // 64, out=moff[1:])
    masks = rng.integers(0, 2**64 - 1, moff[-1], dtype=np.uint64, endpoint=True)
    masks[rng.random(masks.size) < 0.3] = np.uint64(2**64 - 1)
    return ci, ext, masks, moff


def _visible(masks, moff, t, x):
    # Whether mask bit x of ball t is clear (its disc there visible).
    return not (int(masks[moff[t] + x // 64]) >> int(x % 64)) & 1


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("lo0, hi0", [(0, 37), (5, 29)])
def test_slab_lists_hold_the_balls_that_reach_each_slab(lo0, hi0, threads, masked,
                                                        monkeypatch):
    # Ball t is listed in slab sl iff one of its planes lies in the box and in the slab
    # (with masks: and its disc there is visible), in increasing t, whatever the threads
    # that build the lists in parts.
    monkeypatch.setattr(CPU, "cpu_threads", lambda: threads)
    ci, ext, masks, moff = _balls_and_masks(lo0)
    g = 4
    start, lists = (CPU.slab_lists(ci, ext, lo0, hi0, g, masks, moff[:-1]) if masked
                    else CPU.slab_lists(ci, ext, lo0, hi0, g))
    nslab = (hi0 - lo0 + g - 1) // g
    assert start.size == nslab + 1
    dropped = 0
    for sl in range(nslab):
        reach = [t for t in range(ci.size) if any(
            lo0 <= p < hi0 and lo0 + sl * g <= p < lo0 + sl * g + g
            for p in range(ci[t] - ext[t], ci[t] + ext[t] + 1))]
        want = [t for t in reach if not masked or any(
            _visible(masks, moff, t, p - ci[t] + ext[t])
            for p in range(max(ci[t] - ext[t], lo0, lo0 + sl * g),
                           min(ci[t] + ext[t] + 1, hi0, lo0 + sl * g + g)))]
        assert lists[start[sl]:start[sl + 1]].tolist() == want, sl
        dropped += len(reach) - len(want)
    assert (dropped > 0) == masked


@pytest.mark.parametrize("g", [3, 4, 16])
@pytest.mark.parametrize("lo0, hi0", [(0, 37), (5, 29)])
def test_slabs_per_ball_counts_the_unmasked_lists(lo0, hi0, g):
    # slabs_per_ball, which picks masked lists for large balls, is the unmasked lists'
    # entries per ball (balls outside the box or of no plane count 0)
    ci, ext, _, _ = _balls_and_masks(lo0)
    start, lists = CPU.slab_lists(ci, ext, lo0, hi0, g)
    assert CPU.slabs_per_ball(ci, ext, lo0, hi0, g) * ci.size == pytest.approx(lists.size, abs=1e-6)
    assert CPU.slabs_per_ball(ci[:0], ext[:0], lo0, hi0, g) == 0.0


@pytest.mark.parametrize("above", [math.inf, 0.0])
def test_full_slabs_list_large_balls_by_their_masks(above, monkeypatch):
    # slabs of BITS_SLAB planes list every ball that reaches them, or with balls reaching
    # more than MASKED_LISTS_ABOVE slabs each only those with a visible disc there: the
    # same result
    phase = np.ones((45, 37, 41), bool)
    phase[3, 30, 7] = phase[40, 2, 33] = False
    monkeypatch.setattr(CPU, "cpu_threads", lambda: 1)
    assert CPU._slab_planes(phase.shape[0]) == CPU.BITS_SLAB
    calls = []
    lists = CPU.slab_lists
    monkeypatch.setattr(CPU, "slab_lists", lambda *a: calls.append(len(a) > 5) or lists(*a))
    want = T.local_thickness(phase, device="cpu")
    monkeypatch.setattr(CPU, "MASKED_LISTS_ABOVE", above)
    got = T.local_thickness(phase, device="cpu")
    np.testing.assert_array_equal(got, want)
    assert calls == [False, above == 0.0]


@pytest.mark.parametrize("lo0, hi0", [(0, 37), (5, 29)])
def test_slab_test_finds_the_balls_with_a_visible_disc(lo0, hi0):
    # The ordered painter's slab [p0, p1) paints ball m iff one of the ball's planes in
    # the slab has a clear mask bit (a visible disc); slabs are cut by the box's end.
    K = CPU._kernels()
    ci, ext, masks, moff = _balls_and_masks(lo0)
    seen = set()
    for p0 in range(lo0, hi0, 4):
        p1 = min(p0 + 4, hi0)
        for m in range(ci.size):
            bits = [p - ci[m] + ext[m] for p in range(ci[m] - ext[m], ci[m] + ext[m] + 1)
                    if p0 <= p < p1]
            want = any(_visible(masks, moff, m, x) for x in bits)
            assert K._paints_slab(ci, ext, masks, moff, m, p0, p1) == want, (p0, m)
            seen.add((want, len(bits) > 0))
    # drawn: balls outside a slab, and inside it visible and wholly hidden
    assert seen == {(True, True), (False, True), (False, False)}


def test_centre_r2_is_the_distance_at_each_centre(monkeypatch):
    # The squared radii of the kept centres, gathered on the thread pool in ranges, equal
    # numpy's gather whatever the number of threads (and for no centre at all), also when
    # read from the saturated map (many of them above its largest value here).
    phase = blobs((23, 17, 29), sigma=4, seed=5)
    d2 = CPU.edt_sq(phase, (2, 1, 3)).copy()
    cand, sat = CPU.candidates(d2, (2, 1, 3), (0, 0, 0), phase.shape, np.inf)
    want = d2.reshape(-1)[cand]
    assert cand.size > 100 and 0.1 < (want > np.iinfo(sat.dtype).max).mean() < 0.9
    for threads in (1, 3):
        monkeypatch.setattr(CPU, "cpu_threads", lambda threads=threads: threads)
        np.testing.assert_array_equal(CPU.centre_r2(d2, cand), want)
        np.testing.assert_array_equal(CPU.centre_r2(d2, cand, sat), want)
    assert CPU.centre_r2(d2, cand[:0]).size == 0
    assert CPU.centre_r2(d2, cand[:0], sat).size == 0


@pytest.mark.parametrize("threads", [1, 3])
def test_kept_centres_are_gathered_in_flat_order(threads, monkeypatch):
    # count_kept and gather_kept equal np.flatnonzero of the prune mask: planes with no
    # kept voxel, every voxel kept, the last voxel kept or not, any non-zero byte.
    monkeypatch.setattr(CPU, "cpu_threads", lambda: threads)
    rng = np.random.default_rng(3)
    mask = (rng.random((9, 7, 11)) < 0.3).astype(np.uint8) * rng.integers(1, 255, (9, 7, 11),
                                                                          dtype=np.uint8)
    mask[1] = 0
    mask[2] = 1
    mask[3, -1, -1], mask[4, -1, -1] = 1, 0
    mask[5, :, :-1] = 0
    mask[5, -1, -1] = 1
    K = CPU._kernels()
    counts = np.zeros(mask.shape[0] + 1, np.int64)
    CPU._run(K.count_kept, mask.shape[0], mask, counts[1:])
    offsets = np.cumsum(counts)
    cand = np.full(int(offsets[-1]) + 1, -1, np.int64)  # one slot past the end: untouched
    CPU._run(K.gather_kept, mask.shape[0], mask, offsets, cand[:-1])
    np.testing.assert_array_equal(cand[:-1], np.flatnonzero(mask))
    assert cand[-1] == -1


def test_pruning_keeps_far_fewer_centres_and_stays_exact():
    phase = blobs((40, 40, 40), sigma=3, seed=7)
    d2 = CPU.edt_sq(phase, (1, 1, 1)).copy()
    cand, _ = CPU.candidates(d2, (1, 1, 1), (0, 0, 0), phase.shape, np.inf)
    assert cand.size < 0.5 * phase.sum()
    # Painting every phase voxel's ball (no pruning) gives the same map.
    everything = np.flatnonzero(phase.ravel())
    ranks_all, vals_all = CPU.paint(d2, everything, (1, 1, 1), (0, 0, 0), phase.shape)
    np.testing.assert_array_equal(CPU.finish(ranks_all, vals_all), T.local_thickness(phase))


@pytest.mark.parametrize("weights,max_levels", [((1, 1, 1), None), ((1, 2, 3), None),
                                                ((13, 13, 40), None), ((1, 2, 3), 40)])
def test_pruning_table_equals_the_whole_ball_brute_force(weights, max_levels, monkeypatch):
    # the table is built from one octant of offsets; against every offset of the ball
    monkeypatch.setattr(TAB, "_PRUNE_TABLES", {})
    if max_levels is not None:
        monkeypatch.setattr(TAB, "MAX_TABLE_LEVELS", max_levels)
    r2need = 30.0 * max(weights) ** 2
    levels, need, cap = TAB.prune_table(r2need, weights)
    h = [int(math.sqrt(cap) / w) + 2 for w in weights]
    o = np.stack(np.meshgrid(*[np.arange(-m, m + 1) for m in h], indexing="ij"), -1).reshape(-1, 3)
    w = np.array(weights, np.int64)
    norms = ((o * w) ** 2).sum(1)
    np.testing.assert_array_equal(levels, np.unique(norms[norms < cap]))
    if max_levels is not None:
        assert levels.size == max_levels and cap == np.unique(norms)[max_levels]
    for t in range(1, 8):
        e = np.array([(t >> 2) & 1, (t >> 1) & 1, t & 1])
        shifted = (((o + e) * w) ** 2).sum(1)
        for lev in range(0, levels.size, max(1, levels.size // 40)):
            assert need[t - 1, lev] == shifted[norms <= levels[lev]].max(), (t, lev)


def test_exact_beyond_the_pruning_table(monkeypatch):
    # Radii past the discrete table fall back to the continuous containment test.
    monkeypatch.setattr(TAB, "MAX_TABLE_OFFSETS", 30)
    monkeypatch.setattr(TAB, "_PRUNE_TABLES", {})
    for spacing in [(1, 1, 1), (0.7, 1.1, 1.3)]:
        phase = blobs((16, 14, 18), sigma=2.5, seed=12)
        weights, _ = TAB.lattice(spacing)
        levels, need, cap = TAB.prune_table(100.0, weights)
        d2 = CPU.edt_sq(phase, weights)
        assert d2.max() > cap  # the fallback is exercised
        np.testing.assert_array_equal(T.local_thickness(phase, spacing=spacing),
                                      oracle_local_thickness(phase, spacing))


# ----------------------------------------------------------------------------- chunks
def chunked(phase, tile, spacing, halo=None, r_max=None):
    r_max = T.max_inscribed_radius(phase, spacing=spacing) if r_max is None else r_max
    halo = T.thickness_halo(r_max, spacing) if halo is None else halo
    out = np.full(phase.shape, -1.0, np.float32)
    for t in plan_tiles(phase.shape, tile, halo):
        region, cib = t.clipped(phase.shape)
        out[t.core] = T.local_thickness_core(phase[region], cib, r_max, spacing=spacing)
    return out, r_max


@pytest.mark.parametrize("spacing", [(1, 1, 1), (1, 2, 1), (0.8, 1.2, 1.0), (0.65, 0.65, 2.0)])
def test_chunked_equals_whole_with_chunks_smaller_than_2rmax(spacing):
    phase = blobs((44, 38, 33), sigma=3.0, seed=11)
    whole = T.local_thickness(phase, spacing=spacing)
    r_max = T.max_inscribed_radius(phase, spacing=spacing)
    tile = tuple(max(2, int(r_max / s)) for s in spacing)
    assert all(t * s < 2 * r_max for t, s in zip(tile, spacing))
    out, _ = chunked(phase, tile, spacing)
    np.testing.assert_array_equal(out, whole)


def test_chunked_with_too_thin_halo_is_not_exact():
    # The halo matters: with a one-voxel halo some core voxel differs (or r_max is refuted).
    phase = blobs((44, 38, 33), sigma=3.0, seed=11)
    whole = T.local_thickness(phase)
    try:
        out, _ = chunked(phase, (8, 8, 8), (1, 1, 1), halo=1)
    except ValueError:
        return
    assert not np.array_equal(out, whole)


def test_core_rejects_too_small_r_max():
    phase = blobs((30, 30, 30), sigma=3.0, seed=2)
    r_max = T.max_inscribed_radius(phase)
    with pytest.raises(ValueError, match="r_max"):
        T.local_thickness_core(phase, (slice(0, 30),) * 3, r_max / 2)


def test_thickness_halo():
    assert T.thickness_halo(3.0) == (7, 7, 7)
    assert T.thickness_halo(3.0, (1, 2, 0.5)) == (7, 5, 13)
    assert T.thickness_halo(2.5) == (7, 7, 7)
    assert T.thickness_halo(0.0) == (1, 1, 1)
    with pytest.raises(ValueError, match="r_max"):
        T.thickness_halo(-1.0)


def test_max_inscribed_radius():
    phase = np.zeros((11, 11, 11), bool)
    phase[1:10, 1:10, 1:10] = True  # 9-voxel cube: centre is 5 from the outside layer
    assert T.max_inscribed_radius(phase) == 5.0
    assert T.max_inscribed_radius(phase, spacing=(1, 1, 0.5)) == 2.5
    assert T.max_inscribed_radius(phase, spacing=(0.65, 0.65, 2.0)) == pytest.approx(5 * 0.65)
    assert T.max_inscribed_radius(np.zeros((3, 3, 3), bool)) == 0.0


# ----------------------------------------------------------------------------- phase selection
def test_select_phase():
    vol = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(T.select_phase(vol, threshold=10), vol > 10)
    np.testing.assert_array_equal(T.select_phase(vol, threshold=10, invert=True), vol <= 10)
    lab = (np.arange(24) % 3).reshape(2, 3, 4)
    np.testing.assert_array_equal(T.select_phase(lab, label=2), lab == 2)
    np.testing.assert_array_equal(T.select_phase(lab, label=2, invert=True), lab != 2)
    with pytest.raises(ValueError, match="sample7.*empty"):
        T.select_phase(vol, threshold=100, name="sample7")
    with pytest.raises(ValueError, match="sample7.*fills"):
        T.select_phase(vol, threshold=-1, name="sample7")
    with pytest.raises(ValueError, match="sample7.*empty"):
        T.select_phase(lab, label=5, name="sample7")
    with pytest.raises(ValueError, match="exactly one"):
        T.select_phase(vol)
    with pytest.raises(ValueError, match="exactly one"):
        T.select_phase(vol, threshold=1, label=1)


# ----------------------------------------------------------------------------- distribution
def test_value_counts_and_merge_are_exact_and_order_independent():
    rng = np.random.default_rng(0)
    phase = blobs((30, 26, 20), sigma=2.5, seed=1)
    lt = T.local_thickness(phase)
    v, c = T.value_counts(lt)
    assert v.dtype == np.float64 and c.dtype == np.int64 and np.all(np.diff(v) > 0)
    assert c.sum() == phase.sum()
    parts = [T.value_counts(lt[a:b]) for a, b in [(0, 7), (7, 19), (19, 30)]]
    for perm in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        mv, mc = T.merge_value_counts([parts[i] for i in perm])
        np.testing.assert_array_equal(mv, v)
        np.testing.assert_array_equal(mc, c)
    ref_v, ref_c = np.unique(lt[lt > 0], return_counts=True)
    np.testing.assert_array_equal(v, ref_v.astype(np.float64))
    np.testing.assert_array_equal(c, ref_c)
    assert rng is not None


def test_distribution_numbers_match_numpy():
    phase = blobs((30, 26, 20), sigma=2.5, seed=1)
    spacing = (0.5, 1.0, 2.0)
    lt = T.local_thickness(phase, spacing=spacing)
    vals = lt[lt > 0].astype(np.float64)
    ds = volsweep.thickness_distribution(lt, bins=12, spacing=spacing)
    edges = np.linspace(0, vals.max(), 13)
    hist, _ = np.histogram(vals, bins=edges)
    np.testing.assert_array_equal(ds["voxel_count"].values, hist)
    np.testing.assert_allclose(ds["volume"].values, hist * 1.0)
    np.testing.assert_allclose(ds["volume_fraction_of_phase"].values.sum(), 1.0)
    np.testing.assert_allclose(float(ds["mean"]), vals.mean(), rtol=1e-12)
    assert float(ds["median"]) == np.median(vals)
    assert float(ds["max"]) == vals.max()
    assert float(ds["volume_fraction"]) == phase.mean()
    np.testing.assert_allclose(ds["diameter_lower"].values, edges[:-1])
    assert "DIAMETER" in ds.attrs["quantity"] and "radius" in ds.attrs["quantity"]
    assert ds["mean"].attrs["units"] and ds["voxel_count"].attrs["long_name"]
    # Explicit edges and the composition from merged counts.
    edges2 = np.array([0, 1, 2.5, 4, 8, 100.0])
    ds2 = T.distribution_from_counts(*T.value_counts(lt), lt.size, bins=edges2, spacing=spacing)
    np.testing.assert_array_equal(ds2["voxel_count"].values, np.histogram(vals, bins=edges2)[0])
    # Median of an even-sized multiset averages the two middle values (numpy convention).
    v, c = np.array([1.0, 2.0, 3.0]), np.array([1, 1, 2])
    assert float(T.distribution_from_counts(v, c, 10, bins=3)["median"]) == 2.5


# ----------------------------------------------------------------------------- errors, API
def test_bad_inputs_name_the_argument():
    vol = np.random.default_rng(0).random((5, 6, 7)).astype(np.float32)
    with pytest.raises(TypeError, match=r"binary.*bool.*volume > t.*select_phase"):
        T.local_thickness(vol)
    with pytest.raises(TypeError, match="binary"):
        T.local_thickness((vol > 0.5).astype(np.uint8))
    with pytest.raises(ValueError, match=r"binary must be a 3D array.*2D"):
        T.local_thickness(vol[0] > 0.5)
    with pytest.raises(ValueError, match=r"spacing.*\(1, 0, 1\)"):
        T.local_thickness(vol > 0.5, spacing=(1, 0, 1))
    with pytest.raises(ValueError, match=r"spacing.*-2"):
        T.max_inscribed_radius(vol > 0.5, spacing=(1, 1, -2))
    with pytest.raises(ValueError, match="spacing"):
        T.local_thickness(vol > 0.5, spacing=(1, 1))
    with pytest.raises(ValueError, match="device"):
        T.local_thickness(vol > 0.5, device="gpu")
    with pytest.raises(ValueError, match="no background"):
        T.local_thickness(np.ones((3, 4, 5), bool))
    with pytest.raises(TypeError, match="block"):
        T.local_thickness_core(vol, (slice(0, 2),) * 3, 2.0)


def test_public_exports():
    assert volsweep.local_thickness is T.local_thickness
    assert volsweep.thickness_distribution is T.thickness_distribution


def _centres(phase, spacing):
    """Lattice weights, squared distances and the whole box's centres."""
    weights, _ = TAB.lattice(spacing)
    d2 = CPU.edt_sq(phase, weights).copy()
    cand, _ = CPU.candidates(d2, weights, (0, 0, 0), phase.shape, np.inf)
    return weights, d2, cand.copy()


def assert_painters_agree(d2, cand, weights, lo, hi, ref, monkeypatch):
    """Every ball ordered, every small ball max-painted and the two mixed give ``ref``,
    with the small balls' disc masks looked up (disc_mask_lut) or tested."""
    for radius in [0, 1000, 2, 4, CPU.MAX_PAINT_RADIUS]:
        for lut_bytes in (CPU.MASK_LUT_BYTES, 0):
            with monkeypatch.context() as m:
                m.setattr(CPU, "MAX_PAINT_RADIUS", radius)
                m.setattr(CPU, "MASK_LUT_BYTES", lut_bytes)
                got = CPU.paint(d2, cand, weights, lo, hi)
            msg = f"radius {radius} table bytes {lut_bytes}"
            np.testing.assert_array_equal(ref[0], got[0], err_msg=msg)
            np.testing.assert_array_equal(ref[1], got[1])


@pytest.mark.parametrize("spacing,dtype", [((1, 1, 1), np.uint8), ((0.7, 1.3, 1.0), np.uint16)])
def test_max_painter_ranks_are_the_narrowest_type(spacing, dtype, monkeypatch):
    # Where only the max painter paints, its rank map is the narrowest unsigned type that
    # holds every rank, and the same map as in uint32.
    phase = blobs((31, 27, 33), sigma=1.5 if dtype == np.uint8 else 3.5, seed=4)
    weights, d2, cand = _centres(phase, spacing)
    ranks, values = (a.copy() for a in CPU.paint(d2, cand, weights, (0, 0, 0), phase.shape))
    assert ranks.dtype == dtype and values.size <= np.iinfo(dtype).max
    assert values.size > np.iinfo(dtype).max // 256  # the type below would not hold them
    with monkeypatch.context() as m:
        m.setattr(CPU, "MAX_PAINTER_RANKS", (np.uint32,))
        wide = CPU.paint(d2, cand, weights, (0, 0, 0), phase.shape)[0]
    assert wide.dtype == np.uint32
    np.testing.assert_array_equal(ranks, wide)
    np.testing.assert_array_equal(CPU.finish(ranks, values, TAB.lattice(spacing)[1]),
                                  oracle_local_thickness(phase, spacing))


@pytest.mark.parametrize("spacing", [(1, 1, 1), (2, 1, 3), (0.7, 1.3, 1.0)])
def test_max_painter_reads_the_saturated_distance_map(spacing):
    # Pruning also writes d2 saturated to saturated_type, from which the max painter reads
    # the centres' neighbours (their own D2 from the list of centres): the same ranks as
    # from d2, and from maps saturated far lower, where neighbours look smaller or not
    # uphill at all (fewer hidden discs and clipped rows, the same result).
    phase = blobs((41, 37, 43), sigma=3.0, seed=8)
    g = np.indices(phase.shape)
    phase |= ((g - np.array([20, 18, 21])[:, None, None, None]) ** 2).sum(0) < 17**2
    weights = TAB.lattice(spacing)[0]
    d2 = CPU.edt_sq(phase, weights).copy()
    cand, sat = CPU.candidates(d2, weights, (0, 0, 0), phase.shape, np.inf)
    cand, sat = cand.copy(), sat.copy()
    kind = CPU.saturated_type(weights)
    top = np.iinfo(kind).max
    assert sat.dtype == kind
    np.testing.assert_array_equal(sat, np.minimum(d2, top).astype(kind))
    assert kind == np.uint16 or d2[np.isfinite(d2)].max() > top  # saturated here
    r2c = d2.reshape(-1)[cand]
    assert (r2c < (CPU.MAX_PAINT_RADIUS * min(weights)) ** 2).any()  # the max painter paints
    for lo, hi in [((0, 0, 0), phase.shape), ((3, 5, 7), (34, 30, 33))]:
        ref = [a.copy() for a in CPU.paint(d2, cand, weights, lo, hi)]
        for low in (top, 40, 3, 0):
            got = CPU.paint(d2, cand, weights, lo, hi, np.minimum(d2, low).astype(kind))
            np.testing.assert_array_equal(ref[0], got[0], err_msg=f"saturated at {low}")
            np.testing.assert_array_equal(ref[1], got[1])
    lt = CPU.finish(*CPU.paint(d2, cand, weights, (0, 0, 0), phase.shape, sat),
                    TAB.lattice(spacing)[1])
    np.testing.assert_array_equal(lt, oracle_local_thickness(phase, spacing))


@pytest.mark.parametrize("weights", [(1, 1, 1), (1, 3, 2), (2, 1, 1), (13, 13, 40)])
@pytest.mark.parametrize("threads", [1, 3])
def test_disc_thresholds_equal_their_formula(weights, threads, monkeypatch):
    # th[r, c, d + h] = need2[t, D2 - (d w0)^2] + ((d - ex) w0)^2 (class c = (ex + 1) * 4 + t),
    # 0 past the ball's planes: numpy on whole arrays against the kernel's rows
    monkeypatch.setattr(CPU, "cpu_threads", lambda: threads)
    w = weights[0]
    rng = np.random.default_rng(threads)
    vals = np.unique(rng.integers(1, (32 * w) ** 2, 300))
    vals = vals[CPU._half_extent(vals.astype(float), w) < 32]
    need2 = TAB.disc_need_table(int(vals[-1]), weights[1], weights[2])
    h = CPU._half_extent(vals.astype(float), w)
    d = np.arange(64)[None, :] - h[:, None]
    inside = d <= h[:, None]
    rho = np.where(inside, vals[:, None] - (d * w) ** 2, 0).clip(0)
    want = np.zeros((vals.size, 12, 64), np.int64)
    for c in range(12):
        ex, t = c // 4 - 1, c % 4
        want[:, c] = np.where(inside, need2[(t >> 1) * 3 + (t & 1)][rho] + ((d - ex) * w) ** 2, 0)
    np.testing.assert_array_equal(CPU.disc_thresholds(vals, need2, w), want)


@pytest.mark.parametrize("weights", [(1, 1, 1), (1, 3, 2), (2, 1, 1), (13, 13, 40)])
def test_disc_mask_table_equals_the_thresholds(weights):
    # lut[a, c, delta] is _small_mask's test of a class-c neighbour of D2 = a + delta
    # against disc_thresholds, at every delta (beyond the table: its last column).
    lut = CPU.disc_mask_lut(weights, CPU.MASK_LUT_BYTES)
    count, w = lut.shape[0], lut.shape[2] - 1
    assert lut.nbytes <= CPU.MASK_LUT_BYTES and count > (1 if weights[0] > 2 else 60)
    a = np.arange(count)
    th = CPU.disc_thresholds(a, TAB.disc_need_table(count, weights[1], weights[2]), weights[0])
    h = CPU._half_extent(a.astype(float), weights[0])
    assert not lut[:, :, w].any()
    saturated = 0
    for delta in range(3 * w):
        hid = (a[:, None, None] + delta > th) & (np.arange(64) <= 2 * h[:, None, None])
        want = (hid.astype(np.uint64) << np.arange(64, dtype=np.uint64)).sum(axis=-1)
        np.testing.assert_array_equal(lut[:, :, min(delta, w - 1)], want, err_msg=str(delta))
        saturated += delta >= w
    assert saturated == 2 * w and lut[count - 1].any()


@pytest.mark.parametrize("weights", [(1, 1, 1), (1, 3, 2)])
def test_disc_mask_lookup_equals_the_class_test(weights):
    # _lut_mask against _small_mask for random neighbourhoods (_uphill_best), inside the
    # array and on its faces, with uphill neighbours up to 3 table widths above the centre.
    K = CPU._kernels()
    lut = CPU.disc_mask_lut(weights, CPU.MASK_LUT_BYTES)
    count, w = lut.shape[0], lut.shape[2] - 1
    a_all = np.arange(count)
    th = CPU.disc_thresholds(a_all, TAB.disc_need_table(count, weights[1], weights[2]),
                             weights[0])
    h_all = CPU._half_extent(a_all.astype(float), weights[0])
    rng = np.random.default_rng(3)
    best = np.empty(12, np.int64)
    beyond = 0
    for trial in range(3000):
        a = int(rng.integers(max(1, count - 20) if trial % 2 else 1, count))
        if h_all[a] < 0:
            continue
        # about one neighbour in six uphill
        above = rng.random((3, 3, 3)) < 0.17
        d2 = np.where(above, a + rng.integers(0, 3 * w, (3, 3, 3)),
                      a - 1 - rng.integers(0, 3, (3, 3, 3))).clip(0).astype(np.float64)
        i, j, k = (1, 1, 1) if trial % 3 else (1, 2, 0)
        d2[i, j, k] = a
        K._uphill_best(d2, np.int64(a), i, j, k, best)
        beyond += int((best - a >= w - 1).sum())
        want = K._small_mask(best, th, a, h_all[a])
        assert K._lut_mask(best, a, lut) == want, (trial, a)
    assert beyond > 300


def test_disc_masks_from_the_table_equal_the_tested_ones(monkeypatch):
    # The ordered painter's masks and hidden balls, array for array, with the table and
    # with the thresholds tested per class, on a phase whose balls span both.
    phase = blobs((41, 37, 46), sigma=4.5, seed=5)
    weights, d2, cand = _centres(phase, (1, 1, 1))
    assert d2.reshape(-1)[cand].max() >= CPU.disc_mask_lut(weights, CPU.MASK_LUT_BYTES).shape[0]
    K = CPU._kernels()
    kernel = K.disc_skip_masks_bits
    runs = []

    def record(*args):
        runs[-1].append(args)
        return kernel(*args)

    results = []
    for lut_bytes in (CPU.MASK_LUT_BYTES, 0):
        runs.append([])
        with monkeypatch.context() as m:
            m.setattr(CPU, "MAX_PAINT_RADIUS", 0)
            m.setattr(CPU, "MASK_LUT_BYTES", lut_bytes)
            m.setattr(K, "disc_skip_masks_bits", record)
            CPU.paint(d2, cand, weights, (0, 0, 0), phase.shape)
        masks, hidden = runs[-1][0][-4], runs[-1][0][-3]
        results.append((masks.copy(), hidden.copy()))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    assert results[0][0].any() and results[0][1].any()


def _recorded_masks(d2, cand, weights, lo, hi, monkeypatch):
    """The ordered painter's (ext, moff, masks, hidden) for the box [lo, hi)."""
    K = CPU._kernels()
    kernel = K.disc_skip_masks_bits
    runs = []

    def record(*args):
        runs.append(args)
        return kernel(*args)

    with monkeypatch.context() as m:
        m.setattr(CPU, "MAX_PAINT_RADIUS", 0)
        m.setattr(K, "disc_skip_masks_bits", record)
        CPU.paint(d2, cand, weights, lo, hi)
    args = runs[0]
    return args[1], args[4].copy(), args[-5].copy(), args[-4].copy(), args[-3].copy()


@pytest.mark.parametrize("spacing", [(1, 1, 1), (0.7, 1.1, 1.3)])
def test_disc_masks_in_a_core_box_are_the_whole_box_masks_clipped(spacing, monkeypatch):
    # In a core box, a disc outside the box's planes is set as hidden without a test, the
    # others keep the whole box's bits, and a ball is hidden when every disc in the box's
    # planes is (large balls walk the planes, small ones read one word).
    phase = np.ones((45, 38, 41), bool)
    phase[3, 30, 5] = phase[40, 4, 33] = phase[22, 19, 20] = False
    phase |= ~blobs(phase.shape, porosity=0.3, sigma=2.0, seed=4) & (np.arange(45) > 30)[:, None, None]
    weights, d2, cand = _centres(phase, spacing)
    ci, ext, moff, whole, _ = _recorded_masks(d2, cand, weights, (0, 0, 0), phase.shape,
                                              monkeypatch)
    assert ext.max() >= 32 and ext.min() < 32
    for lo, hi in [((9, 0, 0), (30, 38, 41)), ((0, 5, 3), (13, 30, 40))]:
        got = _recorded_masks(d2, cand, weights, lo, hi, monkeypatch)
        np.testing.assert_array_equal(got[0], ci)
        _, _, _, masks, hidden = got
        bits_whole = np.unpackbits(whole.view(np.uint8), bitorder="little")
        bits_box = np.unpackbits(masks.view(np.uint8), bitorder="little")
        dropped = 0
        for m in range(ci.size):
            h = int(ext[m])
            plane = ci[m] + np.arange(-h, h + 1)
            inside = (plane >= lo[0]) & (plane < hi[0])
            span = slice(64 * moff[m], 64 * moff[m] + 2 * h + 1)
            want = np.where(inside, bits_whole[span], 1)
            np.testing.assert_array_equal(bits_box[span], want, err_msg=str(m))
            assert hidden[m] == want.all(), m
            dropped += bool(hidden[m]) and not bits_whole[span].all()
        assert dropped > 0


@pytest.mark.parametrize("spacing", [(1, 1, 1), (2, 1, 3), (0.7, 1.1, 1.3)])
def test_painter_paths_agree(spacing, monkeypatch):
    # The painter's three ways to find skipped discs (prune's uphill bits, its own
    # neighbour lists, the lookups past the integer tables) give the same ranks, in the
    # whole box and in a core box.
    phase = blobs((30, 26, 37), sigma=2.5, seed=11)
    weights, d2, cand = _centres(phase, spacing)
    for lo, hi in [((0, 0, 0), phase.shape), ((3, 5, 7), (20, 19, 30))]:
        ref = [a.copy() for a in CPU.paint(d2, cand, weights, lo, hi)]
        got = CPU.paint(d2, cand, weights, lo, hi)
        np.testing.assert_array_equal(ref[0], got[0])
        np.testing.assert_array_equal(ref[1], got[1])
        with monkeypatch.context() as m:
            m.setattr(CPU, "INT_TABLE_MAX", 1)
            got = CPU.paint(d2, cand, weights, lo, hi)
        np.testing.assert_array_equal(ref[0], got[0])
        np.testing.assert_array_equal(ref[1], got[1])
        assert_painters_agree(d2, cand, weights, lo, hi, ref, monkeypatch)
    # the whole box equals the oracle
    lt = CPU.finish(*CPU.paint(d2, cand, weights, (0, 0, 0), phase.shape), TAB.lattice(spacing)[1])
    np.testing.assert_array_equal(lt, oracle_local_thickness(phase, spacing))


@pytest.mark.parametrize("spacing", [(1, 1, 1), (2, 1, 3), (0.65, 0.65, 2.0)])
@pytest.mark.parametrize("n2", [NB.ROW_WINDOW - 1, NB.ROW_WINDOW, NB.ROW_WINDOW + 13])
def test_max_painter_row_window(n2, spacing, monkeypatch):
    # paint_max paints its rows through a fixed window where a box's rows hold one (n2 >=
    # ROW_WINDOW), one voxel at a time otherwise: the oracle's thickness, and in a box
    # whose rows start and end inside the array, the whole box's ranks there, and the
    # ordered painter's.
    phase = blobs((13, 11, n2 + 7), sigma=1.4, seed=n2)
    np.testing.assert_array_equal(T.local_thickness(phase, spacing=spacing),
                                  oracle_local_thickness(phase, spacing))
    weights, d2, cand = _centres(phase, spacing)
    whole = CPU.paint(d2, cand, weights, (0, 0, 0), phase.shape)[0].copy()
    lo, hi = (2, 1, 4), (11, 10, 4 + n2)
    box, values = CPU.paint(d2, cand, weights, lo, hi)
    np.testing.assert_array_equal(box, whole[2:11, 1:10, 4:4 + n2])
    with monkeypatch.context() as m:
        m.setattr(CPU, "MAX_PAINT_RADIUS", 0)
        ordered = CPU.paint(d2, cand, weights, lo, hi)
    np.testing.assert_array_equal(ordered[0], box)
    np.testing.assert_array_equal(ordered[1], values)


def test_memory_estimate_scales_with_the_shape():
    a = T.thickness_memory_bytes((50, 60, 70), device="cpu")
    b = T.thickness_memory_bytes((100, 120, 140), device="cpu")
    g = T.thickness_memory_bytes((100, 120, 140), device="cuda")
    assert 0 < a < b and 7 * 50 * 60 * 70 * 40 < b - a and g > 100 * 120 * 140 * 40
    with pytest.raises(ValueError, match="shape"):
        T.thickness_memory_bytes((10, 10))


@pytest.mark.parametrize("spacing", [(1, 1, 1), (1, 3, 2), (1, 1, 2), (0.65, 0.65, 2.0),
                                     (0.7, 1.3, 1.0)])
@pytest.mark.parametrize("shape,count,seed", [((70, 13, 11), 3, 0), ((9, 40, 37), 2, 1),
                                              ((23, 21, 19), 4, 2)])
def test_solid_with_isolated_pores_equals_oracle(shape, count, seed, spacing):
    # Balls of many slices (node and row skipping, hidden balls, masks of > 64 planes).
    phase = solid_with_pores(shape, count, seed)
    np.testing.assert_array_equal(T.local_thickness(phase, spacing=spacing),
                                  oracle_local_thickness(phase, spacing))


@pytest.mark.parametrize("spacing", [(1, 1, 1), (1, 2, 3), (0.65, 0.65, 2.0)])
def test_solid_with_isolated_pores_chunked_and_painter_paths(spacing, monkeypatch):
    phase = solid_with_pores((60, 17, 29), 3, 4)
    whole = T.local_thickness(phase, spacing=spacing)
    out, r_max = chunked(phase, (20, 9, 11), spacing)
    np.testing.assert_array_equal(out, whole)
    weights, d2, cand = _centres(phase, spacing)
    for lo, hi in [((0, 0, 0), phase.shape), ((3, 5, 7), (50, 16, 22))]:
        ref = [a.copy() for a in CPU.paint(d2, cand, weights, lo, hi)]
        with monkeypatch.context() as m:
            m.setattr(CPU, "INT_TABLE_MAX", 1)
            got = CPU.paint(d2, cand, weights, lo, hi)
        np.testing.assert_array_equal(ref[0], got[0])
        assert_painters_agree(d2, cand, weights, lo, hi, ref, monkeypatch)
        # every phase voxel as a centre (no pruning) gives the same map
        every = np.flatnonzero(phase.ravel())
        got = CPU.paint(d2, every, weights, lo, hi)
        lut = np.r_[0.0, got[1]]
        np.testing.assert_array_equal(np.r_[0.0, ref[1]][ref[0]], lut[got[0]])


@pytest.mark.parametrize("planes,threads,want", [(128, 2, 16), (128, 16, 4), (192, 8, 12),
                                                   (7, 1, 4), (40, 1, 16), (300, 64, 4)])
def test_slab_planes_give_each_thread_two_slabs_within_the_bounds(planes, threads, want,
                                                                  monkeypatch):
    monkeypatch.setattr(CPU, "cpu_threads", lambda: threads)
    assert CPU._slab_planes(planes) == want


@pytest.mark.parametrize("spacing", [(1, 1, 1), (0.7, 1.3, 1.0)])
def test_ranks_do_not_depend_on_the_slab_size(spacing, monkeypatch):
    # The ordered painter (large balls, one task per slab) gives the same ranks for slabs
    # of 1 to 16 planes, with and without the integer tables, whole and in a core box.
    phase = solid_with_pores((45, 19, 23), 3, 6)
    weights, d2, cand = _centres(phase, spacing)
    for lo, hi in [((0, 0, 0), phase.shape), ((3, 5, 7), (41, 16, 22))]:
        ref = [a.copy() for a in CPU.paint(d2, cand, weights, lo, hi)]
        for g in (1, 3, 4, 7, 16):
            for table_max in (CPU.INT_TABLE_MAX, 1):
                with monkeypatch.context() as m:
                    m.setattr(CPU, "_slab_planes", lambda planes, g=g: g)
                    m.setattr(CPU, "INT_TABLE_MAX", table_max)
                    got = CPU.paint(d2, cand, weights, lo, hi)
                np.testing.assert_array_equal(ref[0], got[0], err_msg=f"{g} planes")
                np.testing.assert_array_equal(ref[1], got[1])
    lt = CPU.finish(*CPU.paint(d2, cand, weights, (0, 0, 0), phase.shape),
                    TAB.lattice(spacing)[1])
    np.testing.assert_array_equal(lt, oracle_local_thickness(phase, spacing))


@pytest.mark.parametrize("m2", [37, 64, 100])
def test_background_is_marked_assigned(m2):
    # _mark_background: the slab's background voxels (D2 = 0) become assigned, the rest
    # stay free and are counted per plane, rows with no phase voxel leave the live bits
    # and the slab's bits are their union over its planes.
    rng = np.random.default_rng(m2)
    d2 = rng.integers(0, 3, (9, 70, m2 + 5)).astype(np.float64)
    d2[3, 5] = 0.0  # a row of background only
    d2[4, 69, 3:67] = 0.0  # its first word only
    p0, lo1, lo2, npl, m1 = 2, 0, 3, 5, 70
    asg, live, agg, full, loc = NB._slab_state(npl, m1, m2)
    free = NB._mark_background(d2, asg, live, agg, full, p0, lo1, lo2)
    window = d2[p0:p0 + npl, lo1:lo1 + m1, lo2:lo2 + m2]
    np.testing.assert_array_equal(free, (window != 0).sum(axis=(1, 2)))
    nw = (m2 + 63) // 64
    bits = np.unpackbits(asg.view(np.uint8), axis=-1, bitorder="little")[..., :m2]
    np.testing.assert_array_equal(bits.astype(bool), window == 0)
    rows = np.unpackbits(live.view(np.uint8), axis=-1, bitorder="little")[..., :m1]
    for w in range(nw):
        row_free = (window[..., 64 * w:64 * w + 64] != 0).any(axis=-1)
        np.testing.assert_array_equal(rows[:, w].astype(bool), row_free)
        np.testing.assert_array_equal(
            np.unpackbits(agg[0, w].view(np.uint8), bitorder="little")[:m1].astype(bool),
            row_free.any(axis=0))
    assert not rows[1, 0, 5] and not rows[2, 0, 69] and (nw == 1 or rows[2, 1, 69])


@pytest.mark.parametrize("spacing", [(1, 1, 1), (0.65, 0.65, 2.0)])
def test_ordered_painter_with_and_without_the_background_marked(spacing, monkeypatch):
    # Slabs whose background is marked assigned finish, and skip their finished planes,
    # early: the same ranks as slabs left unmarked, whole and in a core box, and the
    # oracle's thickness.
    for phase in (solid_with_pores((41, 23, 70), 3, 8), blobs((30, 27, 40), sigma=3.0,
                                                              seed=2)):
        weights, d2, cand = _centres(phase, spacing)
        core = (3, 5, 7), tuple(n - c for n, c in zip(phase.shape, (4, 3, 4)))
        for lo, hi in [((0, 0, 0), phase.shape), core]:
            got = {}
            for mark in (0, 10**9):
                with monkeypatch.context() as m:
                    m.setattr(CPU, "MARK_VOXELS_PER_BALL", mark)
                    m.setattr(CPU, "MAX_PAINT_RADIUS", 0)
                    got[mark] = [a.copy() for a in CPU.paint(d2, cand, weights, lo, hi)]
            np.testing.assert_array_equal(got[0][0], got[10**9][0])
            np.testing.assert_array_equal(got[0][1], got[10**9][1])
        with monkeypatch.context() as m:
            m.setattr(CPU, "MARK_VOXELS_PER_BALL", 10**9)
            lt = CPU.finish(*CPU.paint(d2, cand, weights, (0, 0, 0), phase.shape),
                            TAB.lattice(spacing)[1])
        np.testing.assert_array_equal(lt, oracle_local_thickness(phase, spacing))


def test_bits_painter_slice_skip_on_porous_volume_equals_oracle():
    # Larger balls (R up to ~6) so that many discs are skipped; exact vs the brute force.
    phase = blobs((26, 22, 28), sigma=3.0, seed=3)
    for spacing in [(1, 1, 1), (1, 2, 1)]:
        got = T.local_thickness(phase, spacing=spacing)
        np.testing.assert_array_equal(got, oracle_local_thickness(phase, spacing))


def test_out_of_device_memory_falls_back_to_the_host_with_the_same_result(monkeypatch, caplog):
    """A GPU that runs out of memory hands the call to the CPU painter: same exact result."""
    import logging

    import volsweep.thickness as T

    class FakeOutOfMemory(MemoryError):
        pass

    class FullDevice:
        def edt_sq(self, *args):
            raise FakeOutOfMemory("out of memory allocating 8,589,934,592 bytes")

    real_backend = T._backend
    monkeypatch.setattr(T, "_out_of_device_memory", lambda: (FakeOutOfMemory,))
    monkeypatch.setattr(T, "_backend", lambda d: FullDevice() if d == "cuda" else real_backend(d))
    monkeypatch.setattr(T, "resolve_device", lambda device, array=None: "cuda")
    monkeypatch.setattr(T, "to_device", lambda x, device: x)
    rng = np.random.default_rng(5)
    binary = rng.random((15, 12, 9)) < 0.6
    caplog.set_level(logging.WARNING, logger="volsweep")
    got = T.local_thickness(binary, spacing=(0.65, 0.65, 2.0), device="cuda")
    monkeypatch.setattr(T, "resolve_device", lambda device, array=None: "cpu")
    want = T.local_thickness(binary, spacing=(0.65, 0.65, 2.0), device="cpu")
    np.testing.assert_array_equal(got, want)
    assert any("out of GPU memory" in r.getMessage() for r in caplog.records)


def _kernels_and_disc_table(weights, r2max=6000):
    return CPU._kernels(), TAB.disc_need_table(r2max, weights[1], weights[2]), r2max


@pytest.mark.parametrize("weights", [(1, 1, 1), (13, 13, 40), (7, 13, 10), (2, 1, 3)])
def test_rest_of_side_test_never_claims_a_disc_outside_the_neighbours(weights):
    # _rest_hidden(rq, ...) True must mean: every disc from plane d outwards lies inside the
    # same plane's disc of the neighbour (rq > need2[t, rho(d')] + ((d' - ex) sx)^2 for all
    # d').  It is monotone in rq, so at rq = the largest such bound it must say False.
    K, need2, r2max = _kernels_and_disc_table(weights)
    wx, wy, wz = weights
    rng = np.random.default_rng(sum(weights))
    tried = claimed = 0
    for rp in rng.integers(2 * wx * wx, r2max, 150):
        h = math.isqrt(int(rp) - 1) // wx
        for c in range(12):
            ex, t = c // 4 - 1, c % 4
            for d in range(-h, h + 1):
                step = 1 if d >= 0 else -1
                if ex * step < 0:
                    continue
                outward = range(d, (h + 1) * step, step)
                bound = max(int(need2[(t >> 1) * 3 + (t & 1), rp - (e * wx) ** 2])
                            + ((e - ex) * wx) ** 2 for e in outward)
                tried += 1
                assert not K._rest_hidden(bound, c, d, rp, wx, wy, wz), (rp, c, d)
                claimed += K._rest_hidden(2 * bound + 16, c, d, rp, wx, wy, wz)
    assert tried > 1000 and claimed > tried // 4  # and it is not a test that never says True


@pytest.mark.parametrize("weights", [(1, 1, 1), (13, 13, 40), (7, 13, 10), (2, 1, 3)])
def test_behind_reach_claims_only_discs_inside_the_neighbour_behind(weights):
    # Every plane |d| <= _behind_reach(rq, rp) is hidden by the table test of the neighbour
    # one plane behind in the same column (class e = 0, ex = -sign(d)), and the reach grows
    # with rq; it is the kernel's shortcut, so a plane too many would paint too little.
    K, need2, r2max = _kernels_and_disc_table(weights)
    wx = weights[0]
    rng = np.random.default_rng(11 + sum(weights))
    claimed = 0
    for rp in rng.integers(2 * wx * wx, r2max // 2, 120):
        rp = int(rp)
        h = math.isqrt(rp - 1) // wx
        last = -1
        for rq in sorted({rp, rp + 1, rp + 3 * wx * wx, rp + int(rng.integers(0, rp)),
                          rp + (2 * h + 3) * wx * wx}):
            reach = min(K._behind_reach(rq, rp, wx), h)
            assert reach >= last
            last = reach
            for d in range(1, reach + 1):
                for sd in (d, -d):
                    ex = -1 if sd > 0 else 1
                    rho = rp - (sd * wx) ** 2
                    assert rq > need2[0, rho] + ((sd - ex) * wx) ** 2, (rp, rq, sd)
            claimed += max(reach, 0)
        assert K._behind_reach(rp + (2 * h + 1) * wx * wx, rp, wx) == h  # a whole side
    assert claimed > 400  # and the shortcut is not one that never claims a plane


def test_floor_division_of_the_row_clip_is_exact():
    # the float estimate and its correction give Python's // at every sign, at multiples of
    # the divisor and next to them, and at the kernel's "no bound" value
    rng = np.random.default_rng(3)
    for d in (2, 3, 338, 3200, 2 * 997**2):
        xs = [0, 1, -1, d, -d, d - 1, 1 - d, 7 * d, -7 * d, 7 * d - 1, NB._NO_CLIP, -(2**40) * d]
        xs += [int(v) for v in rng.integers(-(2**45), 2**45, 200)]
        xs += [int(v) * d + e for v in rng.integers(-(2**20), 2**20, 50) for e in (-1, 0, 1)]
        for x in xs:
            assert NB._floor_div(x, d, 1.0 / d) == x // d, (x, d)


@pytest.mark.parametrize("weights", [(1, 1, 1), (13, 13, 40), (2, 1, 3), (7, 5, 6)])
def test_row_clip_skips_only_rows_inside_uphill_balls(weights):
    # paint_max skips the rows dJ of plane dI outside _clip_rows's bounds (from _row_clip's
    # values); every lattice offset of such a row must lie in the ball of an uphill neighbour
    # (0, +-1, 0) or (+-1, +-1, 0), and the bounds must skip some rows.
    wx, wy, wz = weights
    rng = np.random.default_rng(11 + sum(weights))
    half = np.empty(6, np.int64)
    skipped = 0
    for _ in range(150):
        a = int(rng.integers(3 * max(weights) ** 2, 40 * max(weights) ** 2))
        d2 = np.zeros((3, 3, 3))
        d2[1, 1, 1] = a
        up = np.uint32(0)
        for di in (-1, 0, 1):
            for dj in (-1, 1):
                if rng.random() < 0.5:
                    b = a + int(rng.integers(0, 3 * wx * wy + 1))
                    d2[1 + di, 1 + dj, 1] = b
                    up |= np.uint32(1) << np.uint32((di + 1) * 9 + (dj + 1) * 3 + 1)
        if not NB._row_clip(d2, up, 1, 1, 1, a, wx, wy, half):
            continue
        hx = math.isqrt(a - 1) // wx
        for dI in range(-hx, hx + 1):
            rho = a - (dI * wx) ** 2
            hy = math.isqrt(rho - 1) // wy
            jlo, jhi = NB._clip_rows(half, True, dI, wx, wy, hy)
            assert -hy <= jlo and jhi <= hy
            for dJ in range(-hy, hy + 1):
                if jlo <= dJ <= jhi:
                    continue
                skipped += 1
                hz = math.isqrt(rho - (dJ * wy) ** 2 - 1) // wz if rho > (dJ * wy) ** 2 else -1
                for dK in range(-hz, hz + 1):
                    o = np.array([dI * wx, dJ * wy, dK * wz])
                    held = False
                    for di in (-1, 0, 1):
                        for dj in (-1, 1):
                            bit = (di + 1) * 9 + (dj + 1) * 3 + 1
                            if (int(up) >> bit) & 1:
                                e = np.array([di * wx, dj * wy, 0])
                                held |= int(((o - e) ** 2).sum()) < d2[1 + di, 1 + dj, 1]
                    assert held, (weights, a, dI, dJ, dK)
    assert skipped > 100


@pytest.mark.parametrize("weights", [(1, 1, 1), (13, 13, 40), (2, 1, 3)])
def test_first_rest_hidden_plane_is_the_linear_scans(weights):
    # The binary search of the mask kernel finds the plane a scan outwards finds, and
    # _rest_hidden holds at every plane beyond it (what the search relies on).
    K = CPU._kernels()
    wx, wy, wz = weights
    rng = np.random.default_rng(7 + sum(weights))
    found = 0
    for rp in rng.integers(2 * wx * wx, 6000, 60):
        rp = int(rp)
        h = math.isqrt(rp - 1) // wx
        for c in range(12):
            ex = c // 4 - 1
            for d, end in ((0, h), (-1, -h)):
                step = 1 if end >= d else -1
                if ex * step < 0 or (end - d) * step < 0:
                    continue
                for rq in (rp + 1, rp + 4 * wx * wx, 2 * rp, 4 * rp + 100):
                    holds = [bool(K._rest_hidden(rq, c, e, rp, wx, wy, wz))
                             for e in range(d, end + step, step)]
                    scan = next((d + i * step for i, v in enumerate(holds) if v), end + step)
                    assert K._first_rest_hidden(rq, c, d, end, rp, wx, wy, wz) == scan
                    i0 = (scan - d) * step
                    assert all(holds[i0:]), (rp, c, rq)
                    found += scan != end + step
    assert found > 100  # the search is not only ever answering "none"


@pytest.mark.parametrize("spacing", [(1, 1, 1), (1, 3, 2), (0.65, 0.65, 2.0)])
@pytest.mark.parametrize("shape_kind", ["pores", "cylinder"])
def test_far_pruning_ridge_filter_keeps_nearly_every_drop(spacing, shape_kind):
    # Centres on a ridge (TAB.FAR_RIDGE) are not walked: nearly the same centres are dropped
    # as when every centre is walked.
    if shape_kind == "pores":
        phase = solid_with_pores((40, 33, 29), 3, 5)
    else:
        i, j = np.mgrid[:41, :37]
        phase = np.repeat(((i - 20.3) ** 2 + (j - 17.8) ** 2 > 9.5 ** 2)[:, :, None], 23, axis=2)
    weights, _ = TAB.lattice(spacing)
    d2 = CPU.edt_sq(phase, weights).copy()
    every = np.flatnonzero(phase.ravel())
    dropped = []
    for ridge in (TAB.FAR_RIDGE, 0.0):
        inside = np.empty(every.size, np.int64)
        CPU._kernels().prune_far(d2, every, *(float(w) for w in weights), 0.0, 0, 0, 0,
                                 *phase.shape, np.inf, TAB.far_min_r2(weights) / 4,
                                 TAB.FAR_STEP, ridge, TAB.cap_limit(weights), inside, 0, every.size)
        dropped.append(inside >= 0)
    assert dropped[1].sum() > 0.05 * every.size
    assert not (dropped[0] & ~dropped[1]).any()
    lost = (dropped[1] & ~dropped[0]).sum() / dropped[1].sum()
    assert lost < 0.02


def _ball_held_by_a_neighbour(d2, weights, p):
    """Brute force: whether some 26-neighbour of p in the array holds p's lattice ball."""
    a = int(d2[p])
    w = np.array(weights, np.int64)
    grids = np.meshgrid(*[np.arange(-(math.isqrt(a - 1) // v), math.isqrt(a - 1) // v + 1)
                          for v in weights], indexing="ij")
    o = np.stack([g.ravel() for g in grids], 1) * w
    o = o[(o ** 2).sum(1) < a]
    for e in itertools.product((-1, 0, 1), repeat=3):
        q = tuple(np.add(p, e))
        if any(e) and all(0 <= v < n for v, n in zip(q, d2.shape)):
            if (((o - np.array(e) * w) ** 2).sum(1) < d2[q]).all():
                return True
    return False


def _uphill_oracle(d2, p):
    """The uphill bits of p (its 26-neighbours before it in the strict order: D2
    descending, then flat index; bit 31 set) and their largest D2 per class (ex + 1) * 4
    + |ey| * 2 + |ek|, -1 where none."""
    bits = 1 << 31
    best = [-1] * 12
    for n, e in enumerate(itertools.product((-1, 0, 1), repeat=3)):
        q = tuple(np.add(p, e))
        if any(e) and all(0 <= v < m for v, m in zip(q, d2.shape)):
            if d2[q] > d2[p] or (d2[q] == d2[p] and np.ravel_multi_index(q, d2.shape)
                                 < np.ravel_multi_index(p, d2.shape)):
                bits |= 1 << n
                c = (e[0] + 1) * 4 + abs(e[1]) * 2 + abs(e[2])
                best[c] = max(best[c], int(d2[q]))
    return bits, best


@pytest.mark.parametrize("shape", [(9, 11, 7), (3, 3, 3), (1, 6, 5)])
def test_uphill_neighbours_and_their_class_maxima(shape):
    # The painters' uphill neighbours of a centre (inside the array and on its faces),
    # and the largest D2 of each class, against the strict order's definition; ties
    # (equal D2) are frequent.
    rng = np.random.default_rng(sum(shape))
    d2 = rng.integers(0, 6, shape).astype(np.float64)
    best = np.empty(12, np.int64)
    for p in itertools.product(*map(range, shape)):
        a = np.int64(d2[p])
        up = CPU._kernels()._uphill_best(d2, a, *p, best)
        want_bits, want_best = _uphill_oracle(d2, p)
        assert int(up) == want_bits, p
        assert best.tolist() == want_best, p


@pytest.mark.parametrize("spacing", [(1, 1, 1), (0.65, 0.65, 2.0), (1, 3, 2)])
@pytest.mark.parametrize("columns", ["all", "third", "none"])
@pytest.mark.parametrize("box", [None, ((3, 2, 4), (9, 8, 10))])
def test_prune_keeps_exactly_the_balls_no_neighbour_holds(spacing, columns, box):
    # Without far pruning, prune keeps the phase voxels within reach of the box whose
    # lattice ball no 26-neighbour's ball holds: by the neighbours' largest D2 per type
    # (the held table), by each neighbour's test (no table), or both (a table cut short).
    phase = blobs((13, 10, 15), sigma=1.5, seed=11)
    phase[2:11, 3:9, 4:13] = True  # balls of a few voxels beside the blobs' small ones
    weights, _ = TAB.lattice(spacing)
    d2 = CPU.edt_sq(phase, weights).copy()
    r2need = float(d2.max())
    levels, need, r2cap = TAB.prune_table(r2need, weights)
    holds = TAB.held_table(levels, need, TAB.level_lut(levels, r2cap, weights), r2need)
    cut = {"all": holds.shape[1], "third": int(r2need) // 3, "none": 0}[columns]
    lo, hi = box or ((0, 0, 0), phase.shape)
    r2keep = 2.5 ** 2 * max(weights) ** 2 if box else np.inf
    mask = _prune_mask(d2, weights, lo, hi, r2keep, holds=holds[:, :cut].copy())
    kept = 0
    for p in zip(*np.nonzero(phase)):
        gap = [max(l - v, v - h + 1, 0) * w for v, l, h, w in zip(p, lo, hi, weights)]
        if not sum(g * g for g in gap) < r2keep or _ball_held_by_a_neighbour(d2, weights, p):
            assert mask[p] == 0, p
        else:
            assert mask[p] == 1, p
            kept += 1
    assert (mask[~phase] == 0).all()
    assert 0 < kept < 0.5 * phase.sum()
    if box:  # some voxels within reach outside the box are kept, some beyond it are not
        inside = np.zeros(phase.shape, bool)
        inside[tuple(slice(l, h) for l, h in zip(lo, hi))] = True
        assert (mask[~inside] != 0).any() and (mask[inside] != 0).sum() < kept


@pytest.mark.parametrize("spacing", [(1, 1, 1), (0.65, 0.65, 2.0), (2.79, 2.39, 2.39)])
def test_prune_level_lookup_cut_short_searches_the_rest(spacing):
    # The level table stops at LEVEL_LUT_MAX squared lengths; the prune kernel searches
    # the levels of larger balls.  Cut anywhere, the kept centres and bits are the same.
    phase = solid_with_pores((23, 31, 26), 3, 7)
    phase[:, :5] &= blobs((23, 5, 26), sigma=1.5, seed=3)
    weights, _ = TAB.lattice(spacing)
    d2 = CPU.edt_sq(phase, weights).copy()
    r2need = float(d2[np.isfinite(d2)].max())
    levels, need, r2cap = TAB.prune_table(r2need, weights)
    full = TAB.level_lut(levels, r2cap, weights)
    masks = []
    for size in (full.size, full.size // 7, 3, 0):
        levlut = full[:size].copy()
        holds = TAB.held_table(levels, need, levlut, r2need)
        masks.append(_prune_mask(d2, weights, levlut=levlut, holds=holds))
    assert 0 < (masks[0] != 0).sum() < 0.5 * phase.sum()
    for mask in masks[1:]:
        np.testing.assert_array_equal(mask, masks[0])
    np.testing.assert_array_equal(
        full, np.searchsorted(levels, np.arange(full.size, dtype=np.float64)) - 1)


def test_level_lookup_is_bounded_whatever_the_pruning_cap():
    weights = (279, 239, 239)
    levels, _, r2cap = TAB.prune_table(4.0e7, weights)
    assert r2cap > TAB.LEVEL_LUT_MAX
    lut = TAB.level_lut(levels, r2cap, weights)
    assert lut.size == TAB.LEVEL_LUT_MAX
    np.testing.assert_array_equal(
        lut, np.searchsorted(levels, np.arange(lut.size, dtype=np.float64)) - 1)


def test_half_table_views_of_one_cached_table_match_the_definition():
    for w in (1, 3, 239):
        for r2max in (0, 1, 5, 64, 1000, 4097):
            hw = TAB.half_table(r2max, w)
            b = np.arange(r2max + 1)
            want = np.array([-1] + [max(h for h in range(0, 70) if (h * w) ** 2 < v)
                                    for v in b[1:]], np.int64)
            assert hw.dtype == np.int64 and hw.flags.c_contiguous
            np.testing.assert_array_equal(hw, want)


@pytest.mark.parametrize("spacing", [(1, 1, 1), (1, 3, 2), (0.65, 0.65, 2.0)])
@pytest.mark.parametrize("box", [None, ((4, 3, 5), (30, 27, 22))])
@pytest.mark.parametrize("first_radius", [0, 12, 10**4])
@pytest.mark.usefixtures("far_pruning_of_small_solids")
def test_prune_drops_the_far_contained_centres_of_prune_far(spacing, box, first_radius,
                                                            monkeypatch):
    # prune walks far_container itself, before (radius >= FAR_FIRST_RADIUS) or after a
    # centre's 26 neighbours, and first tries the container found for an earlier centre
    # of the row: it keeps the centres and bits that pruning by neighbours and then
    # prune_far would keep, less some that lie inside a ball prune may keep (checked in
    # integers, lattice point by lattice point).
    monkeypatch.setattr(TAB, "FAR_FIRST_RADIUS", first_radius)
    phase = solid_with_pores((40, 33, 29), 3, 5)
    phase[:, :4] &= blobs((40, 4, 29), sigma=1.5, seed=2)  # small balls beside large ones
    weights, _ = TAB.lattice(spacing)
    lo, hi = box or ((0, 0, 0), phase.shape)
    d2 = CPU.edt_sq(phase, weights).copy()
    r2keep = 30.0 ** 2 * max(weights) ** 2 if box else np.inf
    cand, _ = CPU.candidates(d2, weights, lo, hi, r2keep)
    K = CPU._kernels()
    w = tuple(float(v) for v in weights)
    mask = _prune_mask(d2, weights, lo, hi, r2keep)
    near = np.flatnonzero(mask.ravel())
    inside = np.empty(near.size, np.int64)
    K.prune_far(d2, near, *w, 0.0, *lo, *hi, r2keep, TAB.far_min_r2(weights), TAB.FAR_STEP,
                TAB.FAR_RIDGE, TAB.cap_limit(weights), inside, 0, near.size)
    walked = near[inside < 0]
    assert np.isin(cand, walked).all()
    assert (inside >= 0).sum() > 100
    extra = walked[~np.isin(walked, cand)]
    assert extra.size < 0.05 * walked.size
    coords = np.indices(phase.shape).reshape(3, -1).T
    gap = np.maximum(np.maximum(np.array(lo) - coords, coords - np.array(hi) + 1), 0)
    may_keep = np.isfinite(d2.ravel()) & (((gap * weights) ** 2).sum(1) < r2keep)
    if spacing == (1, 1, 1) and box is None:
        assert extra.size > 0  # the containers tried first drop some centres
    for p in extra[:: max(1, extra.size // 12)]:
        assert _inside_some_ball(p, d2, weights, may_keep), p


def _inside_some_ball(p, d2, weights, may_keep):
    """Whether the lattice ball of flat index p lies strictly inside the ball of another
    voxel that may be kept (exact integers, every lattice offset of the ball)."""
    shape = d2.shape
    a = int(d2.ravel()[p])
    r = [math.isqrt(a - 1) // w for w in weights]
    o = np.stack(np.meshgrid(*[np.arange(-h, h + 1) for h in r], indexing="ij"), -1).reshape(-1, 3)
    o = o[((o * weights) ** 2).sum(1) < a]
    c = np.array(np.unravel_index(p, shape))
    flat = np.flatnonzero(may_keep & (d2.ravel() > a))
    q = np.array(np.unravel_index(flat, shape)).T
    b = d2.ravel()[flat].astype(np.int64)
    slack = b - (((q - c) * weights) ** 2).sum(1)  # > 0: the ball of q holds p at least
    order = np.argsort(-slack, kind="stable")
    order = order[slack[order] > 0]
    q, b = q[order], b[order]
    for start in range(0, len(q), 256):
        qs, bs = q[start:start + 256], b[start:start + 256]
        far = (((c + o[:, None, :] - qs[None]) * weights) ** 2).sum(-1)
        if ((far < bs[None]).all(0)).any():
            return True
    return False


@pytest.mark.parametrize("spacing", [(1, 1, 1), (1, 3, 2), (0.65, 0.65, 2.0)])
@pytest.mark.usefixtures("far_pruning_of_small_solids")
def test_far_pruning_drops_only_balls_inside_their_container(spacing):
    # prune_far's claim, checked offset by offset in integers: every lattice point of a
    # dropped ball lies strictly inside the ball of the centre it names, which comes
    # first in the order (larger D2).
    phase = solid_with_pores((40, 33, 29), 3, 5)
    weights, _ = TAB.lattice(spacing)
    d2 = CPU.edt_sq(phase, weights).copy()
    every = np.flatnonzero(phase.ravel())
    r2min = TAB.far_min_r2(weights)
    inside = np.empty(every.size, np.int64)
    CPU._kernels().prune_far(d2, every, *(float(w) for w in weights), 0.0, 0, 0, 0,
                             *phase.shape, np.inf, r2min, TAB.FAR_STEP, TAB.FAR_RIDGE,
                             TAB.cap_limit(weights), inside, 0,
                             every.size)
    dropped = np.flatnonzero(inside >= 0)
    assert dropped.size > 0.05 * every.size
    w = np.asarray(weights, np.int64)
    reach = int(math.isqrt(int(d2.reshape(-1)[every[dropped]].max())))
    grid = np.stack(np.meshgrid(*[np.arange(-(reach // v) - 1, reach // v + 2) for v in w],
                                indexing="ij"), -1).reshape(-1, 3)
    norm = ((grid * w) ** 2).sum(1)
    rng = np.random.default_rng(0)
    for m in rng.choice(dropped, min(300, dropped.size), replace=False):
        p = np.array(np.unravel_index(every[m], phase.shape))
        q = np.array(np.unravel_index(inside[m], phase.shape))
        a, b = int(d2[tuple(p)]), int(d2[tuple(q)])
        assert b > a >= r2min
        ball = grid[norm < a] + p - q
        assert (((ball * w) ** 2).sum(1) < b).all(), (p, q, a, b)


@pytest.mark.parametrize("spacing", [(1, 1, 1), (0.7, 1.3, 1.0)])
@pytest.mark.usefixtures("far_pruning_of_small_solids")
def test_far_pruned_solid_equals_oracle_whole_and_chunked(spacing):
    # A solid deep enough for far pruning (radii well past TAB.FAR_MIN_RADIUS).
    phase = solid_with_pores((31, 26, 23), 3, 6)
    weights = TAB.lattice(spacing)[0]
    d2 = CPU.edt_sq(phase, weights)
    assert d2[np.isfinite(d2)].max() > 2 * TAB.far_min_r2(weights)
    whole = T.local_thickness(phase, spacing=spacing)
    np.testing.assert_array_equal(whole, oracle_local_thickness(phase, spacing))
    out, _ = chunked(phase, (14, 17, 10), spacing)
    np.testing.assert_array_equal(out, whole)


@pytest.mark.parametrize("spacing", [(1, 1, 1), (0.7, 1.3, 1.0)])
def test_rows_of_more_than_two_words_equal_oracle(spacing):
    # Rows of 203 voxels (four 64-bit words) crossed by balls of radius > 64 voxels: the
    # painter's word-by-word test of long row spans; whole and chunked.
    phase = solid_with_pores((9, 11, 203), 2, 8)
    phase[4, 5, 0] = False
    whole = T.local_thickness(phase, spacing=spacing)
    d2 = CPU.edt_sq(phase, TAB.lattice(spacing)[0])
    assert math.isqrt(int(d2[np.isfinite(d2)].max())) // max(TAB.lattice(spacing)[0]) > 64
    np.testing.assert_array_equal(whole, oracle_local_thickness(phase, spacing))
    out, _ = chunked(phase, (5, 11, 70), spacing)
    np.testing.assert_array_equal(out, whole)


def test_numba_scope_notes_of_the_table_lookups_are_silenced_with_or_without_colour():
    # numba's note on the inlined lookups' renamed locals reaches users on the first
    # compile unless filtered; some numba builds colour the message.
    import warnings

    from numba.core.errors import NumbaIRAssumptionWarning

    notes = ["variable '_hw_v184_h_3.1' is not in scope.",
             "\x1b[1m\x1b[1mvariable '_need4_v12_a.2' is not in scope.\n\nThis warning came",
             "\x1b[1mvariable '_need_v3' is not in scope."]
    with warnings.catch_warnings(record=True) as seen:
        warnings.resetwarnings()
        warnings.filterwarnings("ignore", message=NB.SCOPE_NOTE, category=NumbaIRAssumptionWarning)
        warnings.filterwarnings("always", append=True)
        for note in notes + ["variable 'other_v1' is not in scope."]:
            warnings.warn(NumbaIRAssumptionWarning(note))
    assert [str(w.message).split(".")[0] for w in seen] == ["variable 'other_v1' is not in scope"]
    # pytest's own filter (it resets the filters per test) is the same pattern
    import tomllib

    config = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert any(f.split(":")[1] == NB.SCOPE_NOTE
               for f in config["tool"]["pytest"]["ini_options"]["filterwarnings"])


def test_disc_need_tables_of_nearby_radii_are_one_cached_table():
    # Lengths are rounded up to a power of two, so calls with nearby largest radii share
    # one table, and its columns are those of any longer table.
    a = TAB.disc_need_table(1000, 3, 2)
    assert TAB.disc_need_table(700, 3, 2) is a and a.shape[1] == 1024
    longer = TAB._disc_need.__wrapped__(1500, 3, 2)
    np.testing.assert_array_equal(longer[:, :1024], a)
    assert TAB.disc_need_table(2**20 + 5, 40, 40).shape[1] == 2**20 + 6


@pytest.mark.parametrize("weights", [(1, 1, 1), (13, 13, 40), (7, 13, 10)])
def test_disc_need_beyond_the_tables_equals_the_table(weights):
    # The kernels look up disc_need_far beyond the tables: the longest quarter-disc offset
    # shorter than rho gives the same need as the table's column rho, for every rho.
    r2max = 60 * max(weights) ** 2
    table = TAB.disc_need_table(r2max, weights[1], weights[2])
    far = TAB.disc_need_far(r2max, weights[1], weights[2])
    rho = np.arange(1, r2max + 1)
    c = np.searchsorted(far[5], rho) - 1
    for t in (0, 1, 3, 4):
        np.testing.assert_array_equal(far[t, c], table[t, rho])


@pytest.mark.parametrize("weights, extent", [((1, 1, 1), None), ((13, 13, 40), None),
                                             ((13, 13, 40), (7, 5)), ((7, 13, 10), (30, 2)),
                                             ((1, 1, 10), (3, 200))])
def test_far_column_from_the_buckets_is_the_binary_search(weights, extent):
    # The CPU kernels find the longest quarter-disc offset shorter than rho from a bucket
    # index (far_buckets, as far's row 6) and a short scan: the column a binary search
    # finds, for every rho up to past the longest length, whatever the lattice.
    r2max = 60 * max(weights) ** 2
    far = TAB.disc_need_far(r2max, weights[1], weights[2], extent)
    idx = TAB.far_buckets(far[5])
    shift = int(idx[-1])
    assert far.shape[1] == idx.size and int(far[5, -1]) >> shift < idx.size - 1
    f7 = np.vstack([far, idx])
    rho = np.arange(1, int(far[5, -1]) + 3)
    got = np.array([NB._far_column(f7, int(r)) for r in rho])
    np.testing.assert_array_equal(got, np.searchsorted(far[5], rho) - 1)


@pytest.mark.parametrize("weights, extent", [((1, 1, 1), (4, 9)), ((13, 13, 40), (7, 5)),
                                             ((7, 13, 10), (30, 2))])
def test_disc_need_far_clipped_to_the_array_is_the_clipped_discs_need(weights, extent):
    # Offsets past the array's lengths along axes 1 and 2 reach no voxel: the clipped
    # table's need is the largest shifted length over the disc's offsets inside them.
    wy, wz = weights[1:]
    r2max = 60 * max(weights) ** 2
    far = TAB.disc_need_far(r2max, wy, wz, extent)
    assert far.shape[1] <= extent[0] * extent[1]
    a, b = np.meshgrid(np.arange(extent[0]), np.arange(extent[1]), indexing="ij")
    norm = (a * wy) ** 2 + (b * wz) ** 2
    rho = np.arange(1, r2max + 1, 7)
    c = np.searchsorted(far[5], rho) - 1
    for ey in (0, 1):
        for ek in (0, 1):
            shifted = ((a + ey) * wy) ** 2 + ((b + ek) * wz) ** 2
            brute = [shifted[norm < r].max() for r in rho]
            np.testing.assert_array_equal(far[ey * 3 + ek, c], brute)


def test_thin_blocks_past_the_tables_build_a_clipped_disc_table(monkeypatch):
    # A block thin along axes 1 and 2 holds balls far past the tables along axis 0 (spacing
    # (10, 1, 1)): the disc table keeps the offsets inside the block only, and stays exact.
    shape, spacing = (140, 6, 5), (10, 1, 1)
    phase = np.ones(shape, bool)
    phase[0, 2, 3] = False  # balls reach (139 * 10)**2 > 2**20
    built = []

    def recorded(r2max, wy, wz, extent):
        far = TAB.disc_need_far(r2max, wy, wz, extent)
        built.append((far.shape[1], TAB.disc_need_far(r2max, wy, wz).shape[1]))
        return far

    monkeypatch.setattr(CPU, "disc_need_far", recorded)
    np.testing.assert_array_equal(T.local_thickness(phase, spacing=spacing),
                                  oracle_local_thickness(phase, spacing))
    assert built, "the case must reach past the tables"
    (clipped, whole), = built
    assert clipped <= 6 * 5 < whole
    weights, _ = TAB.lattice(spacing)
    assert TAB.far_columns(shape, weights) == 6 * 5
    assert TAB.far_columns((100, 100, 1000), (1, 1, 10)) == 100 * 1000


@pytest.mark.parametrize("spacing", [(1, 1, 1), (0.65, 0.65, 2.0)])
def test_masks_beyond_the_integer_tables_equal_the_tables_masks(spacing, monkeypatch):
    # Past INT_TABLE_MAX the disc masks take their needs from disc_need_far and the
    # half-widths from sqrt: unclipped, the masks, hidden balls and ranks are those of the
    # tables; clipped to the array, a disc whose part inside it is covered is hidden too.
    phase = np.ones((62, 13, 11), bool)
    phase[0, 0, 0] = phase[3, 9, 7] = False  # radii up to about 60 voxels
    weights, d2, cand = _centres(phase, spacing)
    lo, hi = (0, 0, 0), phase.shape
    ref = _recorded_masks(d2, cand, weights, lo, hi, monkeypatch)
    ranks = CPU.paint(d2, cand, weights, lo, hi)[0].copy()
    got = {}
    for clip in (False, True):
        with monkeypatch.context() as m:
            m.setattr(CPU, "INT_TABLE_MAX", 1)
            if not clip:
                m.setattr(CPU, "disc_need_far", lambda r2, wy, wz, extent: TAB.disc_need_far(r2, wy, wz))
            assert d2[np.isfinite(d2)].max() > (32 * weights[0]) ** 2  # past the tables
            got[clip] = _recorded_masks(d2, cand, weights, lo, hi, monkeypatch)
            np.testing.assert_array_equal(CPU.paint(d2, cand, weights, lo, hi)[0], ranks)
    for a, b in zip(ref, got[False]):
        np.testing.assert_array_equal(a, b)
    assert ref[4].any() and not ref[4].all()
    masks, clipped = ref[3], got[True][3]
    np.testing.assert_array_equal(masks & ~clipped, 0)  # hidden discs: a superset
    assert (clipped != masks).any()


@pytest.mark.parametrize("spacing", [(1, 1, 1), (0.65, 0.65, 2.0)])
def test_max_painter_past_the_integer_tables_is_exact(spacing, monkeypatch):
    # Lattice weights in the hundreds put even small balls past the integer tables: the max
    # painter then takes their ranks by a search, their half-widths by sqrt and their disc
    # thresholds from the far table.  With the tables (and the mask table) cut short, the
    # small balls here take that path: the same thickness as with the tables, the oracle's.
    rng = np.random.default_rng(12)
    g = np.indices((23, 19, 17)).astype(float)
    phase = np.zeros((23, 19, 17), bool)
    for _ in range(7):
        c = rng.uniform(0, 1, 3)[:, None, None, None] * np.array(phase.shape)[:, None, None, None]
        phase |= ((g - c) ** 2).sum(0) < rng.uniform(2, 6) ** 2
    phase[rng.random(phase.shape) < 0.03] = False
    ref = T.local_thickness(phase, spacing=spacing)
    seen = []
    paint_max = NB.paint_max

    def recorded(d2, cand, r2c, r2lim, rank_lut, *rest):
        far = rest[4]
        seen.append((far is not None, r2lim, rank_lut.size))
        return paint_max(d2, cand, r2c, r2lim, rank_lut, *rest)

    with monkeypatch.context() as m:
        m.setattr(CPU, "INT_TABLE_MAX", 8)
        m.setattr(CPU, "MASK_LUT_BYTES", 12 * 8 * 3 * 4)
        m.setattr(NB, "paint_max", recorded)
        got = T.local_thickness(phase, spacing=spacing)
    assert seen and all(far and r2lim > size for far, r2lim, size in seen)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, oracle_local_thickness(phase, spacing))


@pytest.mark.parametrize("w", [1, 7, 40])
def test_half_widths_past_the_table_equal_a_longer_table(w):
    # Past a half_table's end the painter's half-widths come from an integer-corrected
    # sqrt: the same as the table would hold, at the steps of squared lengths up to 4e6.
    short = TAB.half_table(50, w)
    full = TAB.half_table(4_000_000, w)
    squares = (np.arange(1, 2000 // w) * w) ** 2  # where the half-width steps
    b = np.concatenate([np.arange(5000), squares - 1, squares, squares + 1,
                        full.size - 1 - np.arange(100)])
    got = [NB._hw(short, w, int(v), far=full) for v in b]
    np.testing.assert_array_equal(got, full[b])
    assert NB._hw(short, w, 10, far=None) == short[10]


@pytest.mark.parametrize("weights", [(1, 1, 1), (13, 13, 40), (7, 13, 10)])
def test_cap_containment_equals_a_brute_force(weights):
    # Far pruning's exact fallback against every lattice point of the ball: p = u from its
    # nearest background (the origin), q = p + v near the ray, b = |u + v|^2.  It never
    # claims a containment that fails, and it finds most of those that the continuous test
    # misses.
    rng = np.random.default_rng(7)
    w = np.array(weights, float)
    found = missed = 0
    for _ in range(400):
        u = rng.integers(-9, 10, 3)
        c = rng.uniform(0.3, 1.5)
        v = np.floor(c * u + rng.uniform(-0.5, 0.5, 3) + 0.5).astype(np.int64)
        if not v.any() or not u.any():
            continue
        a = float(((u * w) ** 2).sum())
        b = float((((u + v) * w) ** 2).sum())
        r = [int(math.isqrt(int(a)) // int(x)) + 1 for x in weights]
        g = np.stack(np.meshgrid(*[np.arange(-h, h + 1) for h in r], indexing="ij"), -1)
        o = g[((g * w) ** 2).sum(-1) < a]
        truth = bool((((o - v) * w) ** 2).sum(-1).max() < b)
        got = NB._cap_holds(a, b, *(int(x) for x in v), *(float(x) for x in weights),
                            TAB.cap_bound(weights))
        assert not got or truth
        el = b - float(((v * w) ** 2).sum()) - (a - 1)
        continuous = el > 0 and el * el > 4 * float(((v * w) ** 2).sum()) * (a - 1)
        if truth and not continuous:
            found += got
            missed += not got
    assert found > 0 and found >= 3 * missed


def _cap_box_points(a, b, v, weights):
    # The number of lattice points in _cap_holds's box (None where it gives up on h0 < 0).
    x = v * np.asarray(weights, float)
    v2 = float((x * x).sum())
    tmax = math.ceil((b - a + 1.0 - v2) * 0.5) - 1.0
    if tmax + 1.0 < 0:
        return None
    i0, i1, j0, j1, k0, k1 = NB._cap_box(a, tmax, *(float(c) for c in x), v2,
                                         *(float(c) for c in weights))
    return (i1 - i0 + 1.0) * (j1 - j0 + 1.0) * (k1 - k0 + 1.0)


@pytest.mark.parametrize("weights", [(1, 1, 1), (1, 1, 3), (13, 13, 40), (7, 13, 10)])
def test_cap_test_gives_up_early_only_on_boxes_too_large(weights):
    # The cap limit (_tables.cap_limit) lets _cap_holds give up without measuring the box:
    # its answer is the same as without the limit, and the box it skips always holds more
    # than CAP_MAX_POINTS points; it skips most of those.
    rng = np.random.default_rng(11)
    w = np.array(weights, float)
    limit = TAB.cap_bound(weights)
    early = too_large = 0
    for _ in range(3000):
        u = rng.integers(-40, 41, 3)
        v = np.floor(rng.uniform(0.2, 1.5) * u + rng.uniform(-2, 2, 3) + 0.5).astype(np.int64)
        if not v.any() or not u.any():
            continue
        a = float(((u * w) ** 2).sum())
        b = float((((u + v) * w) ** 2).sum()) + float(rng.integers(-3, 4)) * w.min() ** 2
        args = (a, b, *(int(x) for x in v), *(float(x) for x in weights))
        assert NB._cap_holds(*args, limit) == NB._cap_holds(*args, np.inf)
        points = _cap_box_points(a, b, v, weights)
        if points is None:
            continue
        too_large += points > TAB.CAP_MAX_POINTS
        x = v * w
        v2 = float((x * x).sum())
        t1 = math.ceil((b - a + 1.0 - v2) * 0.5)
        e = 2.0 * (a - 1.0) - limit
        if e > 0 and 4.0 * (a - 1.0) * t1 * t1 * (1.0 + 1e-9) < e * e * v2:
            early += 1
            assert points > TAB.CAP_MAX_POINTS, (a, b, v)
    assert too_large > 200
    assert early >= 0.5 * too_large


def test_memory_estimate_counts_the_disc_needs_past_the_tables(monkeypatch):
    # A ball past the integer tables (squared lattice radius >= 2**20) makes the painter
    # build disc_need_far; the bound counts it from the shape and the spacing alone.
    import tracemalloc

    shape, spacing = (9, 11, 120), (1, 1, 10)
    weights, _ = TAB.lattice(spacing)
    phase = np.ones(shape, bool)
    phase[4, 5, 0] = False  # balls reach (119 * 10)**2 > 2**20
    built = []

    def recorded(r2max, wy, wz, extent):
        tracemalloc.start()
        far = TAB.disc_need_far(r2max, wy, wz, extent)
        built.append((far.shape[1], tracemalloc.get_traced_memory()[1]))
        tracemalloc.stop()
        return far

    monkeypatch.setattr(CPU, "disc_need_far", recorded)
    np.testing.assert_array_equal(T.local_thickness(phase, spacing=spacing),
                                  oracle_local_thickness(phase, spacing))
    assert built, "the case must reach past the tables"
    columns = TAB.far_columns(shape, weights)
    for n, peak in built:
        assert n <= columns and peak <= CPU._FAR_COLUMN_BYTES * columns
    extra = T.thickness_memory_bytes(shape, spacing=spacing) - T.thickness_memory_bytes(shape)
    assert extra == CPU._FAR_COLUMN_BYTES * columns > 0
    # the GPU holds the table and its bucket index as 7 float64 rows on the device
    gpu = (T.thickness_memory_bytes(shape, spacing=spacing, device="cuda")
           - T.thickness_memory_bytes(shape, device="cuda"))
    assert gpu == 7 * 8 * columns
    assert TAB.far_columns((64, 64, 64), (1, 1, 1)) == 0


@pytest.mark.parametrize("weights", [(1, 1, 1), (7, 13, 10)])
def test_largest_pruning_table_builds_within_its_memory_count(weights, monkeypatch):
    # the bound counts the build of the largest pruning table (PRUNE_TABLE_BUILD_BYTES)
    import tracemalloc

    monkeypatch.setattr(TAB, "_PRUNE_TABLES", {})
    tracemalloc.start()
    TAB.prune_table(1e12, weights)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert TAB._table_cap(1e12, weights) < 1e12 / 4  # the largest table the budget allows
    assert 0.5 * TAB.PRUNE_TABLE_BUILD_BYTES < peak <= TAB.PRUNE_TABLE_BUILD_BYTES


@pytest.mark.parametrize("spacing", [(2.79, 2.39, 2.39), (4.0, 0.1, 0.1)])
def test_large_lattice_weights_keep_tables_within_the_memory_bound(spacing):
    # Three-digit spacings give lattice weights in the hundreds (2.79 and 2.39 um: 279 and
    # 239), where even small balls pass the integer tables: the tables stay at their cap
    # and the call within thickness_memory_bytes, and the result stays exact.
    import tracemalloc

    shape = (12, 17, 19)
    phase = solid_with_pores(shape, 2, seed=5) & blobs(shape, porosity=0.9, seed=5)
    ref = oracle_local_thickness(phase, spacing)
    tracemalloc.start()
    got = T.local_thickness(phase, spacing=spacing)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_array_equal(got, ref)
    assert peak <= T.thickness_memory_bytes(shape, spacing=spacing)


@pytest.mark.parametrize("cap", [0, 3])
def test_balls_past_the_disc_thresholds_stay_exact(monkeypatch, cap):
    # Balls whose squared radius has no row of disc thresholds (TH_MAX_VALUES) take the
    # masks' plane-by-plane test and the ordered painter instead of the max painter.
    monkeypatch.setattr(CPU, "TH_MAX_VALUES", cap)
    for spacing in [(1, 1, 1), (0.65, 0.65, 2.0)]:
        phase = blobs((21, 17, 19), sigma=2.5, seed=13)
        np.testing.assert_array_equal(T.local_thickness(phase, spacing=spacing),
                                      oracle_local_thickness(phase, spacing))


@pytest.mark.parametrize("spacing", [(1, 1, 1), (0.65, 0.65, 2.0)])
def test_each_call_logs_its_stages_at_debug_level(spacing, caplog):
    # One DEBUG line per call: the ball centres that pruning kept (the count of candidates
    # for the same box) and the seconds of the four stages, within the call's time; a core
    # call names its core box; nothing above DEBUG.
    import re
    import time

    phase = solid_with_pores((31, 24, 19), 3, 6)
    weights, _ = TAB.lattice(spacing)
    d2 = CPU.edt_sq(phase, weights).copy()
    kept = CPU.candidates(d2, weights, (0, 0, 0), phase.shape, np.inf)[0].size
    T.local_thickness(phase, spacing=spacing)  # compiled, tables built
    with caplog.at_level("INFO", logger="volsweep"):
        T.local_thickness(phase, spacing=spacing)
    assert not caplog.records
    with caplog.at_level("DEBUG", logger="volsweep"):
        t = time.perf_counter()
        T.local_thickness(phase, spacing=spacing)
        wall = time.perf_counter() - t
    (rec,) = caplog.records
    msg = rec.getMessage()
    assert rec.levelname == "DEBUG" and "(31, 24, 19) block on cpu" in msg, msg
    assert f"lattice weights {tuple(int(w) for w in weights)}: {kept} ball centres kept" in msg
    seconds = [float(v) for v in re.findall(r"(?:distance map|pruning|painting|diameters) "
                                            r"([0-9.e-]+) s", msg)]
    assert len(seconds) == 4 and 0 < sum(seconds) <= 1.01 * wall, msg  # 3 digits each
    caplog.clear()
    r = T.max_inscribed_radius(phase, spacing=spacing)
    with caplog.at_level("DEBUG", logger="volsweep"):
        T.local_thickness_core(phase, (slice(2, 9), slice(None), slice(3, 17)), r, spacing=spacing)
    assert "(core (2, 0, 3)-(9, 24, 17))" in caplog.records[-1].getMessage()


@pytest.mark.parametrize("table_max, seed, fill", [(3, 1, 0.55), (5, 1, 0.7), (6, 5, 0.7)])
def test_ordered_painter_with_the_tables_cut_short_is_exact(table_max, seed, fill, monkeypatch):
    # Every ball through the ordered painter, the rank table cut to table_max squared
    # lengths while the disc-need table keeps its power-of-two length, and the largest
    # squared radius between the two: the painter takes the caller's last tabled length
    # (not the disc table's) for its ranks and half-widths.
    phase = np.random.default_rng(seed).random((13, 17, 11)) < fill
    weights, d2, cand = _centres(phase, (1, 1, 1))
    rmax = int(d2.reshape(-1)[cand].max())
    assert table_max - 1 < rmax < TAB.table_length(table_max - 1)
    monkeypatch.setattr(CPU, "MAX_PAINT_RADIUS", 0)
    monkeypatch.setattr(CPU, "INT_TABLE_MAX", table_max)
    lt = CPU.finish(*CPU.paint(d2, cand, weights, (0, 0, 0), phase.shape))
    np.testing.assert_array_equal(lt, oracle_local_thickness(phase, (1, 1, 1)))
