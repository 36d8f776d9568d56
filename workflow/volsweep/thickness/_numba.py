"""numba kernels of exact local thickness, at module level so numba's disk cache finds them.

Imported lazily by :mod:`volsweep.thickness._cpu` (the GPU path needs no numba).
Lengths are squared lattice lengths (integer weights, exact in float64).

Every kernel is serial, ``nogil`` and works on a range (of planes, slabs or centres):
``_cpu`` runs the ranges on a thread pool.  Serial kernels compile in a fraction of
the time of ``parallel=True`` ones (no parfor lowering), each kernel is called with one
set of argument types (one compilation; the painter has a second for squared radii past
its tables), and kernels a call does not need are not compiled (numba compiles on first
use).

The sections, in order: distance map, pruning, painting order and slab lists, the
ordered painter (large balls), hidden discs (disc masks), the max painter (small balls).
They share one file because numba's disk cache is invalidated only by changes to the
file that defines a cached function, not by changes to the helpers it calls from other
files.
"""

import math
import warnings

import numpy as np
from numba import njit, types
from numba.core.errors import NumbaIRAssumptionWarning
from numba.extending import overload
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros

from ._tables import CAP_MAX_POINTS, GROUP_SPAN

# numba's SSA check reports the inlined lookups' (_hw, _need, _need4) renamed locals as out of
# scope, a pedantic note on code it compiles correctly; users would see it on the first call.
# Some numba builds start the message with terminal colour codes.  (pyproject.toml holds the
# same pattern for pytest, which resets the filters per test.)
SCOPE_NOTE = r"(\x1b\[[0-9;]*m)*variable '_(hw|need4?)_[\w.]*' is not in scope"
warnings.filterwarnings("ignore", message=SCOPE_NOTE, category=NumbaIRAssumptionWarning)

# Divisions follow numpy's error model: no test for a zero divisor (no kernel divides by
# zero), which made the max painter about 4% faster on 250^3 PoreSpy blobs.
_OPTS = dict(cache=True, nogil=True, error_model="numpy")
# Kernels and helpers that allocate nothing, compiled without numba's reference counting:
# it adds an atomic increment and decrement per array argument and call, which took about
# half of the painter's time, two thirds of the disc masks' past the tables and a fifth of
# pruning's on a solid with a few pores (with two threads the counts' cache lines bounce).
_LEAF = dict(_OPTS, _nrt=False)

# A line whose largest finite squared distance is below (BRUTE_SPAN * w)^2 is scanned
# outwards voxel by voxel (a few steps); longer ones take the lower envelope of
# parabolas (Meijster et al.), linear in the line's length whatever the distances.
BRUTE_SPAN = 16
# Axes 1 and 2 are searched a group of voxels at a time, up to GROUP_SPAN steps from each
# voxel: axis 1 over GROUP_LINES neighbouring lines, axis 2 over ROW_GROUP neighbouring
# voxels of a row, each reading the row shifted by the step.  A group steps until its
# farthest voxel is done; wider groups cost fewer loop starts (against 64 and 64 voxels,
# these made the distance map 1.1-1.2x faster on fine phases on 2 cores).
GROUP_LINES = 128
ROW_GROUP = 256
GROUP_SKIP = 32
# The bits of +inf as int64: finite non-negative doubles have smaller bits.
_INF_BITS = np.int64(0x7FF0000000000000)


def _neighbour_bit(di, dj, dk):
    # The bit of neighbour (di, dj, dk) in a centre's uphill bits (_uphill_bit).
    return (di + 1) * 9 + (dj + 1) * 3 + (dk + 1)


# Uphill bits of the face neighbours in a centre's plane: (0, +-1, 0), (0, 0, +-1).
_BIT_J_PLUS = np.uint32(_neighbour_bit(0, 1, 0))
_BIT_J_MINUS = np.uint32(_neighbour_bit(0, -1, 0))
_BIT_K_PLUS = np.uint32(_neighbour_bit(0, 0, 1))
_BIT_K_MINUS = np.uint32(_neighbour_bit(0, 0, -1))


@njit(inline="always", **_OPTS)
def _face_uphill(up):
    # Which face neighbours in the centre's plane are uphill: (0, +1, 0), (0, -1, 0),
    # (0, 0, +1), (0, 0, -1).  Such a neighbour's rows are as wide or wider than the
    # centre's in every plane, so it holds the centre's rows beyond it (j), or each row
    # but the voxel at its far end (k; with both k neighbours, only rows of one voxel).
    one = np.uint32(1)
    return ((up >> _BIT_J_PLUS) & one, (up >> _BIT_J_MINUS) & one,
            (up >> _BIT_K_PLUS) & one, (up >> _BIT_K_MINUS) & one)


@njit(inline="always", **_OPTS)
def _uphill_bit(a, b, di, dj, dk):
    # Neighbour (di, dj, dk) of squared distance b comes before its centre (a) in the strict
    # order (D2 descending, flat index ascending): its bit for _uphill_best, else 0.
    # Without branches (the 26 neighbours' loop then runs straight through).
    hit = (b > a) | ((b == a) & (di * 9 + dj * 3 + dk < 0))
    return np.uint32(hit) << np.uint32((di + 1) * 9 + (dj + 1) * 3 + (dk + 1))


def _cast(x, like):
    """x as a float of the type of the scalar ``like`` (float32 or float64)."""
    return np.float32(x) if isinstance(like, np.float32) else np.float64(x)


@overload(_cast, inline="always")
def _cast_typed(x, like):
    if isinstance(like, types.Float) and like.bitwidth == 32:
        return lambda x, like: np.float32(x)
    return lambda x, like: np.float64(x)


# --------------------------------------------------------------------------- distance map
@njit(**_OPTS)
def edt_axis0(phase, sx, out, j0, j1):
    # Two scans along axis 0 per (j, k) line, for j in [j0, j1): distance to the nearest
    # background voxel in index units, then the canonical first term (t*sx)*(t*sx).
    n0, n1, n2 = phase.shape
    inf = np.inf
    last = np.empty(n2, np.int64)
    nxt = np.empty(n2, np.int64)
    for j in range(j0, j1):
        for k in range(n2):
            last[k] = -1
        for i in range(n0):
            for k in range(n2):
                if not phase[i, j, k]:
                    last[k] = i
                out[i, j, k] = inf if last[k] < 0 else float(i - last[k])
        for k in range(n2):
            nxt[k] = -1
        for i in range(n0 - 1, -1, -1):
            for k in range(n2):
                if not phase[i, j, k]:
                    nxt[k] = i
                t = out[i, j, k]
                if nxt[k] >= 0 and float(nxt[k] - i) < t:
                    t = float(nxt[k] - i)
                if t != inf:
                    ts = t * sx
                    t = ts * ts
                out[i, j, k] = t
    return out


@njit(**_OPTS)
def _line(src, dst, w, s, fs, t):
    # dst[u] = min over v of src[v] + ((u - v) * w)^2 (exact integers in float64), inf
    # where src has no finite value.  s, fs, t: work arrays of the line's length.
    n = src.size
    mx = -1.0
    infs = False
    for u in range(n):
        v = src[u]
        if v == np.inf:
            infs = True
        elif v > mx:
            mx = v
    if mx < 0.0:
        for u in range(n):
            dst[u] = np.inf
        return
    lim = float(BRUTE_SPAN * w)
    if mx < lim * lim and not infs:
        for u in range(n):
            best = src[u]
            d = 1
            while True:
                ts = d * float(w)
                c = ts * ts
                if c >= best:
                    break
                any_ = False
                if u - d >= 0:
                    v = src[u - d] + c
                    if v < best:
                        best = v
                    any_ = True
                if u + d < n:
                    v = src[u + d] + c
                    if v < best:
                        best = v
                    any_ = True
                if not any_:
                    break
                d += 1
            dst[u] = best
        return
    # lower envelope of the parabolas F(x, v) = (w (x - v))^2 + src[v], in int64
    w2 = np.int64(w) * np.int64(w)
    q = -1
    for u in range(n):
        fv = src[u]
        if fv == np.inf:
            continue
        fu = np.int64(fv)
        while q >= 0:
            a = (t[q] - s[q]) * w2 * (t[q] - s[q]) + fs[q]
            b = (t[q] - u) * w2 * (t[q] - u) + fu
            if a > b:
                q -= 1
            else:
                break
        if q < 0:
            q = 0
            s[0] = u
            fs[0] = fu
            t[0] = 0
        else:
            sq = s[q]
            num = w2 * (u * u - sq * sq) + fu - fs[q]
            sep = num // (2 * w2 * (u - sq)) + 1
            if sep < n:
                q += 1
                s[q] = u
                fs[q] = fu
                t[q] = sep
    for u in range(n - 1, -1, -1):
        d = u - s[q]
        dst[u] = float(d * w2 * d + fs[q])
        if u == t[q]:
            q -= 1


@njit(inline="always", **_OPTS)
def _step_both(lo, hi, out, c, cn):
    # One step of a grouped search from both sides: out = min(out, min(lo, hi) + c), and
    # how many values stay above the next step's term cn.
    above_next = 0
    for k in range(out.size):
        x = lo[k]
        y = hi[k]
        x = (x if x < y else y) + c
        y = out[k]
        b = x if x < y else y
        out[k] = b
        above_next += b > cn
    return above_next


@njit(**_LEAF)
def _group_lines(src, dst, j, k0, k1, fw):
    # dst[j, k] = min over d of src[j +- d, k] + (d fw)^2 for the lines k in [k0, k1) at
    # once (contiguous: the loops vectorise), stepping d while a value exceeds (d fw)^2;
    # False when that needs more than GROUP_SPAN steps.  The stop test counts the values
    # above the next step's term (a float max would keep the loops scalar).  The terms
    # take src's type (float32 where _cpu.edt_sq keeps the passes exact in it).
    n1 = src.shape[0]
    out = dst[j, k0:k1]
    cur = src[j, k0:k1]
    m = out.size
    above_next = 0
    first = _cast(fw * fw, cur[0])
    for k in range(m):
        v = cur[k]
        out[k] = v
        above_next += v > first
    d = 1
    while above_next:
        if d > GROUP_SPAN:
            return False
        below = j - d >= 0
        above = j + d < n1
        if not (below or above):
            return True
        c = _cast((d * fw) * (d * fw), cur[0])
        cn = _cast(((d + 1) * fw) * ((d + 1) * fw), cur[0])
        above_next = 0
        if below and above:
            above_next = _step_both(src[j - d, k0:k1], src[j + d, k0:k1], out, c, cn)
        else:
            nb = src[j - d, k0:k1] if below else src[j + d, k0:k1]
            for k in range(m):
                x = nb[k] + c
                y = out[k]
                b = x if x < y else y
                out[k] = b
                above_next += b > cn
        d += 1
    return True


@njit(inline="always", **_OPTS)
def _grouped(src, dst, fw, long):
    # dst = the distance pass along axis 0 of the plane src (n1, n2), GROUP_LINES lines at a
    # time (_group_lines); long[g]: group g needs more steps (its lines of dst not done).
    n1, n2 = src.shape
    long[:] = False
    for j in range(n1):
        for g in range(long.size):
            if not long[g]:
                k0 = g * GROUP_LINES
                long[g] = not _group_lines(src, dst, j, k0, min(k0 + GROUP_LINES, n2), fw)


@njit(**_OPTS)
def _plane_pass(src, dst, w, long, col, res, s, fs, t):
    # dst = the distance pass along axis 0 of the plane src (n1, n2): _grouped, then _line
    # for the lines of the groups that need more steps.
    n1, n2 = src.shape
    _grouped(src, dst, float(w), long)
    ngroups = long.size
    for g in range(ngroups):
        if long[g]:
            for k in range(g * GROUP_LINES, min((g + 1) * GROUP_LINES, n2)):
                for j in range(n1):
                    col[j] = src[j, k]
                _line(col[:n1], res[:n1], w, s, fs, t)
                for j in range(n1):
                    dst[j, k] = res[j]


@njit(**_LEAF)
def _group_row(src, dst, pad, fw):
    # dst[k] = min over d of src[k +- d] + (d fw)^2 along one row, ROW_GROUP voxels at a
    # time (contiguous: the loops vectorise), stepping d while a value exceeds (d fw)^2;
    # False when that needs more than GROUP_SPAN steps.  pad: the row's buffer with
    # GROUP_SPAN + 1 infinite values on each side (set by the caller), so that every
    # shifted read stays inside it.
    n = src.size
    e = GROUP_SPAN + 1
    for k in range(n):
        pad[e + k] = src[k]
    for k0 in range(0, n, ROW_GROUP):
        k1 = min(k0 + ROW_GROUP, n)
        out = dst[k0:k1]
        m = out.size
        above_next = 0
        for k in range(m):
            v = src[k0 + k]
            out[k] = v
            above_next += v > fw * fw
        d = 1
        while above_next and d < n:
            if d > GROUP_SPAN:
                return False
            c = (d * fw) * (d * fw)
            cn = ((d + 1) * fw) * ((d + 1) * fw)
            above_next = _step_both(pad[e + k0 - d:e + k1 - d], pad[e + k0 + d:e + k1 + d],
                                    out, c, cn)
            d += 1
    return True


@njit(**_OPTS)
def edt_axis12(fin, sy, sz, out, i0, i1):
    # The distance passes along axes 1 then 2 for planes [i0, i1), one plane at a time:
    # axis 1 on the plane (_plane_pass), axis 2 on its rows (_group_row, or _line for a row
    # that needs more steps); returns the largest finite value written (0.0 if none).
    # Between the passes each plane is kept in fin's type (float32 where it is exact);
    # the rows are searched in float64 (float32 there was slower on fine phases).
    n0, n1, n2 = fin.shape
    m = max(n1, n2)
    s = np.empty(m, np.int64)
    fs = np.empty(m, np.int64)
    t = np.empty(m, np.int64)
    col = np.empty(m, np.float64)
    res = np.empty(m, np.float64)
    buf = np.empty((n1, n2), fin.dtype)
    pad = np.full(n2 + 2 * (GROUP_SPAN + 1), np.inf)
    long1 = np.empty((n2 + GROUP_LINES - 1) // GROUP_LINES, np.bool_)
    mx = np.int64(0)
    for i in range(i0, i1):
        _plane_pass(fin[i], buf, np.int64(sy), long1, col, res, s, fs, t)
        row = out[i]
        # after a row that needs more steps, the next GROUP_SKIP rows take _line at once
        # (rows alike: where distances are long, a search would give up on each)
        skip = 0
        for j in range(n1):
            if skip > 0:
                skip -= 1
            elif _group_row(buf[j], row[j], pad, float(sz)):
                continue
            else:
                skip = GROUP_SKIP
            _line(buf[j], row[j], np.int64(sz), s, fs, t)
        # the largest finite value, on the bits (non-negative doubles order as their
        # bits; a float max would keep the loop scalar)
        bits = row.reshape(-1).view(np.int64)
        for q in range(bits.size):
            b = bits[q]
            b = b if b < _INF_BITS else np.int64(0)
            mx = mx if mx > b else b
    return np.array([mx]).view(np.float64)[0]


# --------------------------------------------------------------------------- pruning
@njit(inline="always", **_OPTS)
def _gap(i, lo, hi):
    # Voxels from index i to the box [lo, hi) along one axis (0 inside).
    if i < lo:
        return lo - i
    if i >= hi:
        return i - hi + 1
    return 0


@njit(**_LEAF)
def _max_rows(a, b, out):
    # out = max(a, b) element by element (rows of one length; a loop that vectorises).
    for k in range(out.size):
        x = a[k]
        y = b[k]
        out[k] = x if x > y else y


@njit(**_LEAF)
def _saturate(row, out):
    # out = min(row, the largest value of out's integer type), element by element.
    top = np.float64(np.iinfo(out.dtype).max)
    for k in range(out.size):
        out[k] = min(row[k], top)


@njit(**_LEAF)
def _row_actions(held, r, x, y, z, amax, iso, r2min, r2first, k0, k1, acts, kept, rest):
    # What prune does with each voxel k of a row, from whether its 26 neighbours hold its
    # ball: 0 nothing (background, outside [k0, k1), or held), 1 keep it, 2 keep it unless
    # far pruning drops it, 3 walk far pruning's ray and drop it (held, but its walk comes
    # first), -1 test it neighbour by neighbour (D2 >= amax, a neighbour past held's
    # columns).  r: the row; x, y, z: the largest D2 of the voxels' (+-1, 0, 0),
    # (0, +-1, 0) and (+-1, +-1, 0) neighbours (in the array: a neighbour outside it holds
    # nothing).  iso: equal weights, so that the faces' types share a row of held, as do
    # the edges'.  kept: the row of prune's mask, 1 where the action is 1, else 0.
    # Returns the number of the other voxels, whose columns it writes to rest (as
    # floats).  Without branches in the loops: the outcome changes from voxel to voxel.
    n = r.size
    if iso:
        _row_actions_iso(held, r, x, y, z, amax, r2min, r2first, acts)
    else:
        _row_actions_any(held, r, x, y, z, amax, r2min, r2first, acts)
    other = False
    for k in range(n):
        a = r[k]
        act = acts[k] if (a > 0.0) & (k0 <= k) & (k < k1) else 0.0
        acts[k] = act
        kept[k] = act == 1.0
        other |= (act < 0.0) | (act > 1.0)
    count = 0
    if not other:  # most rows of a fine phase: no pass that lists the voxels one by one
        return count
    for k in range(n):
        act = acts[k]
        rest[count] = k
        count += (act < 0.0) | (act > 1.0)
    return count


@njit(inline="always", **_OPTS)
def _index(v, ok):
    # A neighbour's D2 as a column of held (0 where the voxel is not ok: in bounds).
    return np.uint64(v) if ok else np.uint64(0)


@njit(inline="always", **_OPTS)
def _action(face, other, ok, a, r2min, r2first):
    # _row_actions' value for one voxel (selects, not branches).
    walk = 3.0 if a >= r2first else 0.0
    free = 2.0 if a >= r2min else 1.0
    act = 0.0 if face else (walk if other else free)
    return act if ok else -1.0


@njit(inline="always", **_OPTS)
def _iso_action(h0, h2, h6, nb, a, rm, rp, y, ym, yp, x, xm, xp, z, zm, zp, amax, r2min,
                r2first):
    # _row_actions_iso's value for one voxel: its row neighbours rm, rp and the rows'
    # values (y, x, z) at its column and the columns beside it.
    f = max(max(max(rm, rp), y), x)
    e = max(max(max(ym, yp), max(xm, xp)), z)
    c = max(zm, zp)
    ok = (a < amax) & (max(max(f, e), c) < nb)
    face = a <= h0[_index(f, ok)]
    other = (a <= h2[_index(e, ok)]) | (a <= h6[_index(c, ok)])
    return _action(face, other, ok, a, r2min, r2first)


@njit(**_LEAF)
def _row_actions_iso(held, r, x, y, z, amax, r2min, r2first, acts):
    # A neighbour outside the array holds nothing, as one of D2 = 0 would: at the row's
    # ends the one beside it inside stands in for it (the maxima are unchanged).
    nb = held.shape[1]
    h0 = held[0]
    h2 = held[2]
    h6 = held[6]
    n = r.size
    for k in range(1, n - 1):
        acts[k] = _iso_action(h0, h2, h6, nb, r[k], r[k - 1], r[k + 1], y[k], y[k - 1],
                              y[k + 1], x[k], x[k - 1], x[k + 1], z[k], z[k - 1], z[k + 1],
                              amax, r2min, r2first)
    for k, q in ((0, 1), (n - 1, n - 2)):
        acts[k] = _iso_action(h0, h2, h6, nb, r[k], r[q], r[q], y[k], y[q], y[q], x[k], x[q],
                              x[q], z[k], z[q], z[q], amax, r2min, r2first)


@njit(inline="always", **_OPTS)
def _any_action(held, nb, a, rm, rp, y, ym, yp, x, xm, xp, z, zm, zp, amax, r2min, r2first):
    # _row_actions_any's value for one voxel (arguments as _iso_action's).
    c0 = max(rm, rp)
    c1 = y
    c2 = max(ym, yp)
    c3 = x
    c4 = max(xm, xp)
    c5 = z
    c6 = max(zm, zp)
    top = max(max(max(c0, c1), max(c2, c3)), max(max(c4, c5), c6))
    ok = (a < amax) & (top < nb)
    face = (a <= held[0, _index(c0, ok)]) | (a <= held[1, _index(c1, ok)]) | (
        a <= held[3, _index(c3, ok)])
    other = ((a <= held[2, _index(c2, ok)]) | (a <= held[4, _index(c4, ok)])) | (
        (a <= held[5, _index(c5, ok)]) | (a <= held[6, _index(c6, ok)]))
    return _action(face, other, ok, a, r2min, r2first)


@njit(**_LEAF)
def _row_actions_any(held, r, x, y, z, amax, r2min, r2first, acts):
    # As _row_actions_iso, with a row of held per neighbour type.
    nb = held.shape[1]
    n = r.size
    for k in range(1, n - 1):
        acts[k] = _any_action(held, nb, r[k], r[k - 1], r[k + 1], y[k], y[k - 1], y[k + 1],
                              x[k], x[k - 1], x[k + 1], z[k], z[k - 1], z[k + 1], amax, r2min,
                              r2first)
    for k, q in ((0, 1), (n - 1, n - 2)):
        acts[k] = _any_action(held, nb, r[k], r[q], r[q], y[k], y[q], y[q], x[k], x[q], x[q],
                              z[k], z[q], z[q], amax, r2min, r2first)


@njit(inline="always", **_OPTS)
def _keep_span(x, y, sz, lo, hi, n, r2keep):
    # Whether a row whose gaps to the box along axes 0 and 1 are (x, y) (lengths) has a
    # voxel within r2keep of the box, and the span [k0, k1) of those voxels: prune's test
    # (x * x + y * y) + z * z < r2keep, with z = sz * _gap(k, lo, hi), which holds on one
    # span about [lo, hi).
    base = x * x + y * y
    if not base < r2keep:
        return False, 0, 0
    # the largest gap t within reach (at most n), from a square root, then exactly
    t = n if r2keep == np.inf else min(n, int(math.sqrt(r2keep - base) / sz))
    while t > 0 and not base + (t * sz) * (t * sz) < r2keep:
        t -= 1
    while t < n and base + ((t + 1) * sz) * ((t + 1) * sz) < r2keep:
        t += 1
    return True, max(lo - t, 0), min(hi + t, n)


@njit(**_LEAF)
def prune(d2, sx, sy, sz, eps, lo0, lo1, lo2, hi0, hi1, hi2, r2keep, levels, need, r2cap,
          levlut, holds, r2min, r2first, step, ridge, cap, above, rows, out, d2sat, i0, i1):
    # out[p] = 1 for the centres kept, else 0 (planes [i0, i1)): D(p) > 0, within r2keep of
    # the box [lo, hi), and whose ball is not inside a 26-neighbour q's ball.  For D2(p) < r2cap
    # the test is exact and discrete: the ball {o: |o|^2 < a} shifted by e lies in
    # {o: |o|^2 < b} iff b > need[type(e), level(a)] (the max of |o + e|^2 over the
    # ball); beyond the table, the continuous D(q) >= D(p) + |e| in squared form.  A
    # centre that far pruning finds inside a farther ball (a >= r2min, _far_dropped) is
    # dropped too: from r2first on before its 26 neighbours are read (most such walks
    # succeed), below it after them (the neighbours prune most such centres first).
    # above[i0]: this task's containers of the row before, per column (_far_dropped).
    # Rows first take, per column, the largest D2 of the neighbours of each type (rows[i0],
    # vectorised; the array's faces included): holds (_tables.held_table) then tests all
    # 26 in 3 or 7 lookups.
    # d2sat: d2 saturated to its integer type (_saturate), written row by row for paint_max.
    n0, n1, n2 = d2.shape
    col = above[i0]
    iso = sx == sy == sz
    # x rows of j - 1, j, j + 1 by j % 3, then y, z, acts and the rest's columns (_row_actions)
    work = rows[i0]
    for i in range(i0, i1):
        gi = _gap(i, lo0, hi0)
        col[:] = 0
        # by rows (_row_actions); at the array's faces the neighbour inside stands in for
        # the one outside (a maximum with itself), which holds nothing
        by_rows = holds.shape[1] > 0 and n0 > 1 and n1 > 1 and n2 > 2
        im = i - 1 if i > 0 else i + 1
        ip = i + 1 if i < n0 - 1 else i - 1
        if by_rows:
            _max_rows(d2[im, 0], d2[ip, 0], work[0])
            _max_rows(d2[im, 1], d2[ip, 1], work[1])
        for j in range(n1):
            gj = _gap(j, lo1, hi1)
            hint = (0, 0, 0)  # far pruning's last container along the row (_far_dropped)
            if by_rows:
                jm = j - 1 if j > 0 else j + 1
                jp = j + 1 if j < n1 - 1 else j - 1
                if 0 < j < n1 - 1:
                    _max_rows(d2[im, j + 1], d2[ip, j + 1], work[(j + 1) % 3])
                _max_rows(d2[i, jm], d2[i, jp], work[3])
                _max_rows(work[jm % 3], work[jp % 3], work[4])
            row = d2[i, j]
            _saturate(row, d2sat[i, j])
            acts = work[5]
            k0 = k1 = 0
            count = n2
            in_reach = by_rows
            if in_reach:
                in_reach, k0, k1 = _keep_span(gi * sx, gj * sy, sz, lo2, hi2, n2, r2keep)
            if in_reach:
                # the actions 0 and 1 are written here; the loop below takes the others
                count = _row_actions(holds, row, work[j % 3], work[3], work[4],
                                     float(levlut.size), iso, r2min, r2first, k0, k1, acts,
                                     out[i, j], work[6])
            for t in range(count):
                k = np.int64(work[6, t]) if in_reach else t
                act = acts[k] if in_reach else -1.0
                out[i, j, k] = 0
                a = row[k]
                if act > 1.0:
                    dropped, hint = _far_dropped(d2, i, j, k, a, hint, sx, sy, sz, eps, lo0,
                                                 lo1, lo2, hi0, hi1, hi2, r2keep, r2min, step,
                                                 ridge, cap, col)
                    out[i, j, k] = not dropped and act == 2.0
                    continue
                if not a > 0.0:
                    continue
                gk = _gap(k, lo2, hi2)
                x = gi * sx
                y = gj * sy
                z = gk * sz
                g = (x * x + y * y) + z * z
                if not g < r2keep:
                    continue
                keep = True
                if a != np.inf:
                    lev = -1
                    if a < r2cap:
                        if a < levlut.size:
                            # integer spacing: a is an exact integer (no binary search)
                            lev = levlut[int(a)]
                        else:
                            # number of levels < a, minus one (binary search)
                            lo_ = 0
                            hi_ = levels.size
                            while lo_ < hi_:
                                mid = (lo_ + hi_) >> 1
                                if levels[mid] < a:
                                    lo_ = mid + 1
                                else:
                                    hi_ = mid
                            lev = lo_ - 1
                    if lev >= 0 and 0 < i < n0 - 1 and 0 < j < n1 - 1 and 0 < k < n2 - 1:
                        # the six face neighbours first: most pruned centres lie in one
                        # of their balls
                        nf0 = need[3, lev]
                        nf1 = need[1, lev]
                        nf2 = need[0, lev]
                        if (nf0 < d2[i - 1, j, k] < np.inf or nf0 < d2[i + 1, j, k] < np.inf
                                or nf1 < d2[i, j - 1, k] < np.inf or nf1 < d2[i, j + 1, k] < np.inf
                                or nf2 < d2[i, j, k - 1] < np.inf or nf2 < d2[i, j, k + 1] < np.inf):
                            continue
                        if a >= r2first:
                            dropped, hint = _far_dropped(d2, i, j, k, a, hint, sx, sy, sz, eps,
                                                         lo0, lo1, lo2, hi0, hi1, hi2, r2keep,
                                                         r2min, step, ridge, cap, col)
                            if dropped:
                                continue
                        # inside the array, without bounds tests: whether an edge or corner
                        # neighbour holds the ball, in one pass over the 26 neighbours
                        # (each read once, no branch; the face neighbours' tests are known
                        # to fail here)
                        held = False
                        for di in range(-1, 2):
                            for dj in range(-1, 2):
                                for dk in range(-1, 2):
                                    if di == 0 and dj == 0 and dk == 0:
                                        continue
                                    b = d2[i + di, j + dj, k + dk]
                                    et = abs(di) * 4 + abs(dj) * 2 + abs(dk) - 1
                                    held |= (need[et, lev] < b) & (b < np.inf)
                        if held:
                            continue
                        if r2min <= a < r2first:
                            dropped, hint = _far_dropped(d2, i, j, k, a, hint, sx, sy, sz, eps,
                                                         lo0, lo1, lo2, hi0, hi1, hi2, r2keep,
                                                         r2min, step, ridge, cap, col)
                            if dropped:
                                continue
                        out[i, j, k] = 1
                        continue
                    if a >= r2min:
                        # past the table (the largest balls) or on the array's faces: the
                        # row's last container first, as above
                        dropped, hint = _far_dropped(d2, i, j, k, a, hint, sx, sy, sz, eps, lo0,
                                                     lo1, lo2, hi0, hi1, hi2, r2keep, r2min,
                                                     step, ridge, cap, col)
                        if dropped:
                            continue
                    for di in range(-1, 2):
                        ii = i + di
                        if ii < 0 or ii >= n0:
                            continue
                        for dj in range(-1, 2):
                            jj = j + dj
                            if jj < 0 or jj >= n1:
                                continue
                            for dk in range(-1, 2):
                                kk = k + dk
                                if kk < 0 or kk >= n2 or (di == 0 and dj == 0 and dk == 0):
                                    continue
                                b = d2[ii, jj, kk]
                                if b == np.inf:
                                    continue
                                if lev >= 0:
                                    et = abs(di) * 4 + abs(dj) * 2 + abs(dk) - 1
                                    if b > need[et, lev]:
                                        keep = False
                                        break
                                    continue
                                x = di * sx
                                y = dj * sy
                                z = dk * sz
                                c = (x * x + y * y) + z * z
                                if b >= c:
                                    el = (b + c) - a
                                    if el >= 0.0 and el * el >= 4.0 * b * c * (1.0 + eps):
                                        keep = False
                                        break
                            if not keep:
                                break
                        if not keep:
                            break
                if keep:
                    out[i, j, k] = 1
    return out


@njit(**_OPTS)
def count_kept(mask, counts, i0, i1):
    # counts[i]: the kept centres (non-zero mask bytes) of plane i, for planes [i0, i1).
    for i in range(i0, i1):
        plane = mask[i].reshape(-1)
        c = 0
        for q in range(plane.size):
            c += plane[q] != 0
        counts[i] = c


@njit(**_OPTS)
def gather_kept(mask, offsets, cand, i0, i1):
    # The flat indices of plane i's kept centres from cand[offsets[i]] on, in flat order
    # (planes [i0, i1)): np.flatnonzero, by plane ranges.  Without a branch per voxel: each
    # index is written and kept by moving on (up to the plane's last kept voxel, so that no
    # write leaves the plane's range).
    m = mask.shape[1] * mask.shape[2]
    for i in range(i0, i1):
        plane = mask[i].reshape(-1)
        o = offsets[i]
        if offsets[i + 1] == o:
            continue
        last = m - 1
        while plane[last] == 0:
            last -= 1
        base = i * m
        for q in range(last + 1):
            cand[o] = base + q
            o += plane[q] != 0


@njit(**_LEAF)
def far_container(d2, i, j, k, sx, sy, sz, eps, lo0, lo1, lo2, hi0, hi1, hi2, r2keep, r2min,
                  step, ridge, cap):
    # The flat index of a centre q whose ball holds the whole ball of centre (i, j, k), -1
    # if none is found.  Where p and its six neighbours share their nearest background
    # voxel s, central differences of D2 give p - s exactly, and the balls along the ray
    # from s through p grow faster than they move: q is tried on that ray, at c,
    # c*step ... of the farthest in-array point.  Every lattice offset o of p's ball has
    # |o|^2 <= a - 1 (a = D2(p), integers), so the ball is inside q's when
    # sqrt(a - 1) + |q - p| < sqrt(D2(q)), in squared form el = D2(q) - |q - p|^2 - (a - 1)
    # > 0 and el^2 > 4 |q - p|^2 (a - 1), which is exact (eps = 0) below prune's exact
    # bound; D2(q) > a, so q comes first in the order.  Centres with a < r2min, on the
    # array's faces or on a ridge (_tables.FAR_RIDGE) are not walked.
    n0, n1, n2 = d2.shape
    wx = sx * sx
    wy = sy * sy
    wz = sz * sz
    a = d2[i, j, k]
    if not (r2min <= a < np.inf) or i == 0 or j == 0 or k == 0 or i == n0 - 1 \
            or j == n1 - 1 or k == n2 - 1:
        return -1
    ux = (d2[i + 1, j, k] - d2[i - 1, j, k]) / (4.0 * wx)
    uy = (d2[i, j + 1, k] - d2[i, j - 1, k]) / (4.0 * wy)
    uz = (d2[i, j, k + 1] - d2[i, j, k - 1]) / (4.0 * wz)
    if not (math.isfinite(ux) and math.isfinite(uy) and math.isfinite(uz)):
        return -1
    x = ux * sx  # a ridge point: no ray
    y = uy * sy
    z = uz * sz
    if (x * x + y * y) + z * z < ridge * a:
        return -1
    # the farthest point p + c u in the array, c <= 2
    c = 2.0
    if ux > 0:
        c = min(c, (n0 - 1 - i + 0.49) / ux)
    elif ux < 0:
        c = min(c, (i + 0.49) / -ux)
    if uy > 0:
        c = min(c, (n1 - 1 - j + 0.49) / uy)
    elif uy < 0:
        c = min(c, (j + 0.49) / -uy)
    if uz > 0:
        c = min(c, (n2 - 1 - k + 0.49) / uz)
    elif uz < 0:
        c = min(c, (k + 0.49) / -uz)
    pi = 0
    pj = 0
    pk = 0
    while True:
        vi = int(math.floor(c * ux + 0.5))
        vj = int(math.floor(c * uy + 0.5))
        vk = int(math.floor(c * uz + 0.5))
        if vi == 0 and vj == 0 and vk == 0:
            return -1
        c *= step
        if vi == pi and vj == pj and vk == pk:
            continue
        pi = vi
        pj = vj
        pk = vk
        if _holds(d2, i, j, k, vi, vj, vk, a, sx, sy, sz, eps, lo0, lo1, lo2, hi0, hi1, hi2,
                  r2keep, cap):
            return ((i + vi) * n1 + (j + vj)) * n2 + (k + vk)
    return -1


@njit(inline="always", **_OPTS)
def _holds(d2, i, j, k, vi, vj, vk, a, sx, sy, sz, eps, lo0, lo1, lo2, hi0, hi1, hi2, r2keep,
           cap):
    # Whether the ball of q = (i, j, k) + (vi, vj, vk), a voxel of the array that prune may
    # keep (within r2keep of the box), holds the whole ball of (i, j, k) (D2 = a):
    # far_container's test.
    n0, n1, n2 = d2.shape
    ii = i + vi
    jj = j + vj
    kk = k + vk
    if ii < 0 or jj < 0 or kk < 0 or ii >= n0 or jj >= n1 or kk >= n2:
        return False
    b = d2[ii, jj, kk]
    if b == np.inf:
        return False
    x = _gap(ii, lo0, hi0) * sx
    y = _gap(jj, lo1, hi1) * sy
    z = _gap(kk, lo2, hi2) * sz
    if not (x * x + y * y) + z * z < r2keep:
        return False
    x = vi * sx
    y = vj * sy
    z = vk * sz
    v2 = (x * x + y * y) + z * z
    el = b - v2 - (a - 1.0)
    if not el > 0.0:  # (then b > a)
        return False
    if el * el > 4.0 * v2 * (a - 1.0) * (1.0 + eps):
        return True
    return cap >= 0.0 and _cap_holds(a, b, vi, vj, vk, sx, sy, sz, cap)


@njit(**_LEAF)
def _cap_holds(a, b, vi, vj, vk, sx, sy, sz, cap):
    # Exactly whether every lattice offset o with |o|^2 < a has |o - v|^2 < b (False too
    # when the cap below has more than CAP_MAX_POINTS points in its box).  The continuous
    # test spends one squared unit of slack (|o|^2 <= a - 1), which an offset v off the ray
    # exceeds at lattice weights of tens (0.65 um by 2 um voxels); the lattice has far more.
    # With t = -o.v (integers), |o - v|^2 <= (a - 1) + 2 t + |v|^2, so only the offsets with
    # t > tmax, a cap of the ball on the side away from v, can fail: they are tested one by
    # one.  Most caps are too deep for that: cap (_tables.cap_limit) gives them up first,
    # without a square root: 2 r (r - h0) > cap iff e = 2 (a - 1) - cap > 2 r h0.
    x = vi * sx
    y = vj * sy
    z = vk * sz
    v2 = (x * x + y * y) + z * z
    tmax = math.ceil((b - a + 1.0 - v2) * 0.5) - 1.0  # 2 tmax < b - a + 1 - |v|^2
    if tmax + 1.0 < 0.0:
        return False
    e = 2.0 * (a - 1.0) - cap
    if e > 0.0 and 4.0 * (a - 1.0) * (tmax + 1.0) * (tmax + 1.0) * (1.0 + 1e-9) < e * e * v2:
        return False
    i0, i1, j0, j1, k0, k1 = _cap_box(a, tmax, x, y, z, v2, sx, sy, sz)
    if (i1 - i0 + 1.0) * (j1 - j0 + 1.0) * (k1 - k0 + 1.0) > CAP_MAX_POINTS:
        return False
    for oi in range(int(i0), int(i1) + 1):
        ox = oi * sx
        dx = (oi - vi) * sx
        for oj in range(int(j0), int(j1) + 1):
            oy = oj * sy
            dy = (oj - vj) * sy
            for ok in range(int(k0), int(k1) + 1):
                oz = ok * sz
                dz = (ok - vk) * sz
                if (ox * ox + oy * oy) + oz * oz < a and (dx * dx + dy * dy) + dz * dz >= b:
                    return False
    return True


@njit(**_LEAF)
def _cap_box(a, tmax, x, y, z, v2, sx, sy, sz):
    # The lattice box (i0, i1, j0, j1, k0, k1) of _cap_holds's cap o . (-v / |v|) >= h0,
    # h0 = (tmax + 1) / |v| >= 0, of the ball |o|^2 <= a - 1; v = (x, y, z) in lengths.
    vn = math.sqrt(v2)
    r = math.sqrt(a - 1.0)
    h0 = (tmax + 1.0) / vn
    # the cap lies in the ball of radius sqrt(2 r (r - h0)) about -h0 v / |v| (padded for
    # rounding)
    rho = math.sqrt(max(2.0 * r * (r - h0), 0.0) + 1e-12 * r * r) + 1.0
    f = -h0 / vn
    return (math.floor((f * x - rho) / sx), math.ceil((f * x + rho) / sx),
            math.floor((f * y - rho) / sy), math.ceil((f * y + rho) / sy),
            math.floor((f * z - rho) / sz), math.ceil((f * z + rho) / sz))


@njit(inline="always", **_OPTS)
def _far_dropped(d2, i, j, k, a, hint, sx, sy, sz, eps, lo0, lo1, lo2, hi0, hi1, hi2, r2keep,
                 r2min, step, ridge, cap, col):
    # Whether far pruning drops centre (i, j, k), and the next hint.  The hint is the
    # offset of the container found for an earlier centre of the row, (0, 0, 0) for none:
    # moved along with the centre, it often holds this ball too, and its voxels are in
    # cache, so it is tried before far_container walks the ray (any container is exact).
    # Then col[k], the offset found at this column in an earlier row of the plane (kept
    # here per column), before the walk.
    n0, n1, n2 = d2.shape
    vi, vj, vk = hint
    if (vi != 0 or vj != 0 or vk != 0) and _holds(d2, i, j, k, vi, vj, vk, a, sx, sy, sz, eps,
                                                  lo0, lo1, lo2, hi0, hi1, hi2, r2keep, cap):
        col[k, 0], col[k, 1], col[k, 2] = vi, vj, vk
        return True, hint
    wi, wj, wk = np.int64(col[k, 0]), np.int64(col[k, 1]), np.int64(col[k, 2])
    if (wi != 0 or wj != 0 or wk != 0) and (wi != vi or wj != vj or wk != vk) and _holds(
            d2, i, j, k, wi, wj, wk, a, sx, sy, sz, eps, lo0, lo1, lo2, hi0, hi1, hi2, r2keep,
            cap):
        return True, (wi, wj, wk)
    q = far_container(d2, i, j, k, sx, sy, sz, eps, lo0, lo1, lo2, hi0, hi1, hi2, r2keep,
                      r2min, step, ridge, cap)
    if q < 0:
        col[k, 0], col[k, 1], col[k, 2] = 0, 0, 0
        return False, (0, 0, 0)
    vi, vj, vk = q // (n1 * n2) - i, (q // n2) % n1 - j, q % n2 - k
    col[k, 0], col[k, 1], col[k, 2] = vi, vj, vk
    return True, (vi, vj, vk)


@njit(**_OPTS)
def prune_far(d2, cand, sx, sy, sz, eps, lo0, lo1, lo2, hi0, hi1, hi2, r2keep, r2min, step,
              ridge, cap, out, m0, m1):
    # far_container of the centres cand[m0:m1] (flat indices), into out[m0:m1]; prune
    # applies it itself, this serves the tests and the GPU's emulated kernel.
    n0, n1, n2 = d2.shape
    for m in range(m0, m1):
        p = cand[m]
        out[m] = far_container(d2, p // (n1 * n2), (p // n2) % n1, p % n2, sx, sy, sz, eps,
                               lo0, lo1, lo2, hi0, hi1, hi2, r2keep, r2min, step, ridge,
                               cap)
    return out


# --------------------------------------------------------------------------- order, slab lists
@njit(**_OPTS)
def half(base, r2, s):
    # Largest h >= 0 with base + (h*s)*(h*s) < r2, or -1.
    rem = r2 - base
    if not rem > 0.0:
        return -1
    h = int(math.sqrt(rem) / s)
    while True:
        t = (h + 1) * s
        if base + t * t < r2:
            h += 1
        else:
            break
    while h >= 0:
        t = h * s
        if base + t * t < r2:
            break
        h -= 1
    return h


@njit(**_OPTS)
def centre_arrays(cand, r2i, rank_lut, ext_lut, n1, n2, ci, cj, ck, ranks, ext, m0, m1):
    # Coordinates, rank and half extent along axis 0 of the centres cand[m0:m1] (flat
    # indices) from their integer D2 (r2i) and the tables indexed by it.
    for m in range(m0, m1):
        p = cand[m]
        ci[m] = p // (n1 * n2)
        cj[m] = (p // n2) % n1
        ck[m] = p % n2
        ranks[m] = rank_lut[r2i[m]]
        ext[m] = ext_lut[r2i[m]]


@njit(**_OPTS)
def paint_order(ranks, skip, nvals):
    # The centres with skip == 0 in decreasing rank, by index within a rank (indices into
    # ranks): the painting order, by counting.
    cnt = np.zeros(nvals + 2, np.int64)
    n = 0
    for m in range(ranks.size):
        if skip[m] == 0:
            cnt[ranks[m]] += 1
            n += 1
    pos = np.empty(nvals + 2, np.int64)
    s = 0
    for r in range(nvals + 1, -1, -1):
        pos[r] = s
        s += cnt[r]
    order = np.empty(n, np.int64)
    for m in range(ranks.size):
        if skip[m] == 0:
            r = ranks[m]
            order[pos[r]] = m
            pos[r] += 1
    return order


@njit(**_OPTS)
def disc_thresholds(vals, h, need2, far, w, th, r0, r1):
    # th[r, c, d + h[r]] for rows [r0, r1) (_cpu.disc_thresholds): need2[t, rho] + ((d -
    # ex) w)^2 with rho = vals[r] - (d w)^2, class c = (ex + 1) * 4 + t, t = |ey| * 2 + |ek|
    # (need2's row (t >> 1) * 3 + (t & 1), past its end far's: _need); 0 past the ball's
    # planes (d > h[r]).
    for r in range(r0, r1):
        for c in range(12):
            ex = c // 4 - 1
            t = c % 4
            for x in range(64):
                d = x - h[r]
                if d > h[r]:
                    th[r, c, x] = 0
                else:
                    rho = max(vals[r] - (d * w) ** 2, 0)
                    th[r, c, x] = _need(need2, far, t, rho) + ((d - ex) * w) ** 2


@njit(inline="always", **_OPTS)
def _any_visible(masks, base, x0, x1):
    # Whether some bit in [x0, x1] of the mask words from masks[base] is clear (a visible
    # disc among those planes).
    for w in range(x0 >> 6, (x1 >> 6) + 1):
        if ~masks[base + w] & _span_word(w, x0, x1):
            return True
    return False


@njit(inline="always", **_OPTS)
def _planes_within(ci, ext, m, p0, p1):
    # The planes [a, b] of ball m (centre plane ci[m], half extent ext[m]) within [p0, p1);
    # a > b: none.
    h = ext[m]
    if h < 0:
        return p0, p0 - 1
    return max(ci[m] - h, p0), min(ci[m] + h, p1 - 1)


@njit(inline="always", **_OPTS)
def _paints_slab(ci, ext, masks, moff, m, p0, p1):
    # Whether ball m has a plane in the slab's [p0, p1) whose disc is visible: its bit
    # (d + h for plane offset d) is clear in the mask words from masks[moff[m]].
    a, b = _planes_within(ci, ext, m, p0, p1)
    if a > b:
        return False
    base = ext[m] - ci[m]
    return _any_visible(masks, moff[m], a + base, b + base)


@njit(inline="always", **_OPTS)
def _slab_span(ci, ext, t, lo0, hi0, g):
    # Ball t's planes [a, b] in the box, and the first and last slab they reach (sa > sb:
    # none).
    a, b = _planes_within(ci, ext, t, lo0, hi0)
    if a > b:
        return a, b, 1, 0
    return a, b, (a - lo0) // g, (b - lo0) // g


@njit(inline="always", **_OPTS)
def _visible_in_slab(ci, ext, masks, moff, t, a, b, lo0, g, sl):
    # Whether ball t (its planes [a, b] in the box) has a visible disc in slab sl: a clear
    # bit (d + h for plane offset d) among the slab's planes in its mask words.  This is
    # _paints_slab with the planes known: calling that here built the lists 5x slower.
    base = ext[t] - ci[t]
    p0 = lo0 + sl * g
    return _any_visible(masks, moff[t], max(p0, a) + base, min(p0 + g - 1, b) + base)


@njit(**_OPTS)
def slab_counts(ci, ext, lo0, hi0, g, masks, moff, bounds, counts, p0, p1):
    # counts[p, sl] = how many balls of part p (balls [bounds[p], bounds[p + 1])) are
    # listed in slab sl, for the parts [p0, p1): every ball that reaches it, or with disc
    # masks (moff not empty) those with a visible disc in it.
    masked = moff.size > 0
    for p in range(p0, p1):
        for t in range(bounds[p], bounds[p + 1]):
            a, b, sa, sb = _slab_span(ci, ext, t, lo0, hi0, g)
            for sl in range(sa, sb + 1):
                counts[p, sl] += not masked or _visible_in_slab(ci, ext, masks, moff, t, a, b,
                                                                lo0, g, sl)


@njit(**_OPTS)
def slab_fill(ci, ext, lo0, hi0, g, masks, moff, bounds, fill, lists, p0, p1):
    # Lists the balls of the parts [p0, p1) in their slabs (as slab_counts counts them)
    # from the positions fill[p, sl] (the counts accumulated over the slabs, then the
    # parts).
    masked = moff.size > 0
    for p in range(p0, p1):
        for t in range(bounds[p], bounds[p + 1]):
            a, b, sa, sb = _slab_span(ci, ext, t, lo0, hi0, g)
            for sl in range(sa, sb + 1):
                if not masked or _visible_in_slab(ci, ext, masks, moff, t, a, b, lo0, g, sl):
                    lists[fill[p, sl]] = t
                    fill[p, sl] += 1


@njit(**_OPTS)
def gather_order(order, ci, cj, ck, r2i, ranks, ext, moff, oci, ocj, ock, or2i, oranks, oext,
                 omoff, t0, t1):
    # The centre arrays in painting order: o*[t] = *[order[t]] for t in [t0, t1).
    for t in range(t0, t1):
        m = order[t]
        oci[t] = ci[m]
        ocj[t] = cj[m]
        ock[t] = ck[m]
        or2i[t] = r2i[m]
        oranks[t] = ranks[m]
        oext[t] = ext[m]
        omoff[t] = moff[m]


# --------------------------------------------------------------------------- ordered painter
@njit(**_LEAF)
def fill_word(asg, live, agg, full, loc, a, b, w, m, rank, track):
    # Give the still unassigned voxels of mask m in word w of row b, slab plane a, the
    # value rank (in loc, the slab's ranks).  asg holds one bit per voxel (1 = assigned);
    # live[a, w, b >> 6] one bit per row whose word w still has an unassigned voxel,
    # agg[0, w, b >> 6] the same over all the slab's planes; full[w] is word w of a
    # finished row.  Returns how many voxels were assigned.
    free = m & ~asg[a, b, w]
    if not free:
        return 0
    v = asg[a, b, w] | free
    asg[a, b, w] = v
    base = w << 6
    c = 0
    while free:
        loc[a, b, base + trailing_zeros(free)] = rank
        free &= free - np.uint64(1)
        c += 1
    if track and v == full[w]:
        bit = np.uint64(1) << np.uint64(b & 63)
        live[a, w, b >> 6] &= ~bit
        for p in range(live.shape[0]):
            if live[p, w, b >> 6] & bit:
                return c
        agg[0, w, b >> 6] &= ~bit
    return c


@njit(**_LEAF)
def fill_bits(asg, live, agg, full, loc, a, b, lft, rgt, rank, track):
    # fill_word over the voxels [lft, rgt] of row b.
    tot = 0
    for w in range(lft >> 6, (rgt >> 6) + 1):
        tot += fill_word(asg, live, agg, full, loc, a, b, w, _span_word(w, lft, rgt), rank, track)
    return tot


@njit(inline="always", **_OPTS)
def _span_word(w, lft, rgt):
    # The bits of word w that lie in the voxel span [lft, rgt] of a row.
    ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
    m = ALL
    if w == lft >> 6:
        m &= ALL << np.uint64(lft & 63)
    if w == rgt >> 6:
        m &= ALL >> np.uint64(63 - (rgt & 63))
    return m


@njit(**_LEAF)
def _any_free(asg, a, jp, jm, okp, okm, lft, rgt):
    # Whether row jp (if okp) or row jm (if okm) of slab plane a has an unassigned voxel in
    # [lft, rgt], word by word (rows longer than two words).
    for w in range(lft >> 6, (rgt >> 6) + 1):
        m = _span_word(w, lft, rgt)
        if okp and m & ~asg[a, jp, w]:
            return True
        if okm and m & ~asg[a, jm, w]:
            return True
    return False


@njit(**_OPTS)
def _row_bits(v, u, bl, br):
    # Row-bit word v (word u of a row set, 64 rows each) restricted to rows [bl, br].
    lo = u * 64
    if bl > lo:
        v &= np.uint64(0xFFFFFFFFFFFFFFFF) << np.uint64(bl - lo)
    if br < lo + 63:
        v &= np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(lo + 63 - br)
    return v


@njit(**_OPTS)
def _slab_state(npl, m1, m2):
    # A slab's painting state (fill_word): assigned bits, live rows per plane and over
    # the slab, the words of a finished row and the slab's ranks (0 = not covered), all
    # the painting thread's own (the output is written once, by _store_slab).
    nw = (m2 + 63) >> 6
    nu = (m1 + 63) >> 6
    asg = np.zeros((npl, m1, nw), np.uint64)
    agg = np.zeros((1, nw, nu), np.uint64)
    for b in range(m1):
        for w in range(nw):
            agg[0, w, b >> 6] |= np.uint64(1) << np.uint64(b & 63)
    live = np.empty((npl, nw, nu), np.uint64)
    for a in range(npl):
        for w in range(nw):
            for u in range(nu):
                live[a, w, u] = agg[0, w, u]
    full = np.empty(nw, np.uint64)
    for w in range(nw):
        full[w] = np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(64 - min(64, m2 - 64 * w))
    loc = np.zeros((npl, m1, m2), np.uint32)
    return asg, live, agg, full, loc


@njit(**_OPTS)
def _mark_background(d2, asg, live, agg, full, p0, lo1, lo2):
    # Mark the slab's background voxels (D2 = 0, which no ball covers) assigned, so that
    # its rows, planes and the slab itself finish once their phase voxels are painted.
    # Returns the phase voxels of each plane.
    npl, m1, nw = asg.shape
    free = np.zeros(npl, np.int64)
    for a in range(npl):
        for b in range(m1):
            for w in range(nw):
                v = np.uint64(0)
                for c in range(64 - np.int64(leading_zeros(full[w]))):
                    v |= np.uint64(d2[p0 + a, lo1 + b, lo2 + 64 * w + c] == 0) << np.uint64(c)
                asg[a, b, w] = v
                free[a] += 64 - np.int64(leading_zeros(full[w]))
                if v:
                    free[a] -= _popcount(v)
                if v == full[w]:
                    live[a, w, b >> 6] &= ~(np.uint64(1) << np.uint64(b & 63))
    for w in range(nw):
        for u in range(agg.shape[2]):
            v = np.uint64(0)
            for a in range(npl):
                v |= live[a, w, u]
            agg[0, w, u] = v
    return free


@njit(inline="always", **_OPTS)
def _popcount(v):
    n = 0
    while v:
        v &= v - np.uint64(1)
        n += 1
    return n


@njit(**_OPTS)
def _store_slab(loc, out, i0):
    # A finished slab's ranks into output planes [i0, i0 + len(loc)).
    npl, m1, m2 = loc.shape
    for a in range(npl):
        for b in range(m1):
            for k in range(m2):
                out[i0 + a, b, k] = loc[a, b, k]


@njit(**_LEAF)
def _any_rows_f(agg, jc, kc, base, r2, sy, sz, m1, m2):
    # _any_rows for squared lengths beyond exact integers (float64): the disc of the plane at
    # squared distance base from the centre.
    hk = half(base, r2, sz)
    if hk < 0:
        return False
    for w in range(max(kc - hk, 0) >> 6, (min(kc + hk, m2 - 1) >> 6) + 1):
        z = max(w * 64 - kc, kc - min(w * 64 + 63, m2 - 1), 0) * sz
        hy = half(base + z * z, r2, sy)
        if hy < 0:
            continue
        bl = max(jc - hy, 0)
        br = min(jc + hy, m1 - 1)
        for u in range(bl >> 6, (br >> 6) + 1):
            if _row_bits(agg[0, w, u], u, bl, br):
                return True
    return False


@njit(**_LEAF)
def _paint_rows_f(asg, live, agg, full, loc, ia, ib, ic, j0, k0, r2, rank, sx, sy, sz, p0,
                  lo1, lo2, m1, m2):
    # _paint_rows_int for squared lengths beyond exact integers (half-widths by search, no
    # disc skip).
    tot = 0
    ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
    jc = j0 - lo1
    kc = k0 - lo2
    for i in range(ia, ib + 1):
        x = (i - ic) * sx
        base = x * x
        hk = half(base, r2, sz)
        if hk < 0:
            continue
        a = i - p0
        for w in range(max(kc - hk, 0) >> 6, (min(kc + hk, m2 - 1) >> 6) + 1):
            c0 = w * 64
            c1 = min(c0 + 64, m2) - 1
            z = max(c0 - kc, kc - c1, 0) * sz
            hy = half(base + z * z, r2, sy)
            if hy < 0:
                continue
            bl = max(jc - hy, 0)
            br = min(jc + hy, m1 - 1)
            for u in range(bl >> 6, (br >> 6) + 1):
                bits = _row_bits(live[a, w, u], u, bl, br)
                while bits:
                    jj = u * 64 + trailing_zeros(bits)
                    bits &= bits - np.uint64(1)
                    y = (jj - jc) * sy
                    hk2 = half(base + y * y, r2, sz)
                    lft = max(kc - hk2, c0)
                    rgt = min(kc + hk2, c1)
                    if hk2 < 0 or lft > rgt:
                        continue
                    msk = (ALL << np.uint64(lft & 63)) & (ALL >> np.uint64(63 - (rgt & 63)))
                    tot += fill_word(asg, live, agg, full, loc, a, jj, w, msk, rank, True)
    return tot


@njit(**_OPTS)
def paint_bits(start, lists, ext, ci, cj, ck, r2s, ranks, sx, sy, sz, lo0, lo1, lo2,
               hi0, hi1, hi2, g, out, sl0, sl1):
    # Slabs [sl0, sl1) of g output planes; per slab, balls in decreasing rank: the first
    # ball to reach a voxel has the largest rank among those covering it, so it is
    # written once and marked in a bitmask (one uint64 word per 64 voxels of a row).
    # Unassigned voxels are counted per node (16 rows x 64 voxels x the slab's planes):
    # a ball whose nodes in the slab are all assigned is skipped whole, and a slab is
    # done once all its voxels are.  Each slab belongs to one task, and the result does
    # not depend on the order of equal ranks, so it is the same for any number of threads.
    m0, m1, m2 = out.shape
    for sl in range(sl0, sl1):
        p0 = lo0 + sl * g
        p1 = min(p0 + g, hi0)
        asg, live, agg, full, loc = _slab_state(p1 - p0, m1, m2)
        remaining = (p1 - p0) * m1 * m2
        for t in range(start[sl], start[sl + 1]):
            if remaining == 0:
                break
            m = lists[t]
            r2 = r2s[m]
            ic = ci[m]
            j0 = cj[m]
            k0 = ck[m]
            rank = ranks[m]
            h = ext[m]
            ia = max(ic - h, p0)
            ib = min(ic + h, p1 - 1)
            x = (min(max(ic, ia), ib) - ic) * sx
            hj = half(x * x, r2, sy)
            hk = half(x * x, r2, sz)
            if hj < 0 or hk < 0:
                continue
            if not _any_rows_f(agg, j0 - lo1, k0 - lo2, x * x, r2, sy, sz, m1, m2):
                continue
            remaining -= _paint_rows_f(asg, live, agg, full, loc, ia, ib, ic, j0, k0, r2, rank,
                                       sx, sy, sz, p0, lo1, lo2, m1, m2)
        _store_slab(loc, out, p0 - lo0)
    return out


# Lookups in the tables indexed by squared length.  Their last argument, far, is None
# while every squared radius is inside the tables: the kernels are then compiled without
# the branch past the tables' end (a second compilation serves the squared radii beyond).
def _hw(table, w, b, far):
    """table[b] (a half_table: the largest h >= 0 with (h*w)^2 < b, -1 for b <= 0); with
    far an array, past the table's end the same by sqrt, made exact in integers."""
    if far is None or b < table.size:
        return table[b]
    q = (b - 1) // (w * w)  # (h*w)^2 < b  <=>  h^2 <= q
    h = np.int64(math.sqrt(q))
    if (h + 1) * (h + 1) <= q:
        h += 1
    if h * h > q:
        h -= 1
    return h


@njit(inline="always", **_OPTS)
def _far_column(far, rho):
    # The last column of far whose length (row 5) is < rho: the longest offset inside the
    # disc of rho.  far: _tables.with_far_buckets (row 6 the bucket index of row 5's
    # lengths, its shift in the last column).
    n = far.shape[1]
    c = far[6, min(rho >> far[6, n - 1], max(n - 2, 0))]
    while c < n and far[5, c] < rho:
        c += 1
    return c - 1


def _need4(need2, far, rho):
    """need2[t, rho] for t = 0, 1, 3, 4 (disc_need_table); with far an array (rows as
    _far_column's), past the table's end from far's running maxima."""
    if far is None or rho < need2.shape[1]:
        return need2[0, rho], need2[1, rho], need2[3, rho], need2[4, rho]
    c = _far_column(far, rho)
    return far[0, c], far[1, c], far[3, c], far[4, c]


def _need(need2, far, t, rho):
    """need2[(t >> 1) * 3 + (t & 1), rho] (class type t < 4), past the table as _need4."""
    row = (t >> 1) * 3 + (t & 1)
    if far is None or rho < need2.shape[1]:
        return need2[row, rho]
    return far[row, _far_column(far, rho)]


# past the tables the lookups are calls without reference counting (inlined, they added an
# atomic increment and decrement per call that took two thirds of the disc masks' time)
_need4_far = njit(**_LEAF)(_need4)
_need_far = njit(**_LEAF)(_need)


@overload(_hw, inline="always")
def _hw_typed(table, w, b, far):
    if isinstance(far, types.NoneType):
        return lambda table, w, b, far: table[b]
    return _hw  # inlined: a call per row costs more (5x on rows past the tables)


def _rank(out, r):
    """r as the element type of the rank map out (uint8, uint16 or uint32)."""
    return out.dtype.type(r)


@overload(_rank, inline="always")
def _rank_typed(out, r):
    if out.dtype == types.uint8:
        return lambda out, r: np.uint8(r)
    if out.dtype == types.uint16:
        return lambda out, r: np.uint16(r)
    return lambda out, r: np.uint32(r)


@overload(_need4, inline="always")
def _need4_typed(need2, far, rho):
    if isinstance(far, types.NoneType):
        return lambda need2, far, rho: (need2[0, rho], need2[1, rho], need2[3, rho],
                                        need2[4, rho])
    return lambda need2, far, rho: _need4_far(need2, far, rho)


@overload(_need, inline="always")
def _need_typed(need2, far, t, rho):
    if isinstance(far, types.NoneType):
        return lambda need2, far, t, rho: need2[(t >> 1) * 3 + (t & 1), rho]
    return lambda need2, far, t, rho: _need_far(need2, far, t, rho)


@njit(**_LEAF)
def _any_rows(bits, a, jc, kc, rho, hwy, hwz, far, syi, szi, m1, m2):
    # Some row of row set a (bits[a], per word column) that the disc of squared radius
    # rho centred on (row jc, column kc) reaches in some word column still has an
    # unassigned voxel there: bits is live (one plane) or agg (a = 0, the whole slab).
    hk = _hw(hwz, szi, rho, far)
    for w in range(max(kc - hk, 0) >> 6, (min(kc + hk, m2 - 1) >> 6) + 1):
        gz = max(w * 64 - kc, kc - min(w * 64 + 63, m2 - 1), 0) * szi
        rem = rho - gz * gz
        if rem <= 0:
            continue
        hy = _hw(hwy, syi, rem, far)
        bl = max(jc - hy, 0)
        br = min(jc + hy, m1 - 1)
        for u in range(bl >> 6, (br >> 6) + 1):
            if _row_bits(bits[a, w, u], u, bl, br):
                return True
    return False


@njit(inline="always", **_OPTS)
def _nearest_free(free, x):
    # The distance from bit position x (any integer) to the nearest set bit of free != 0.
    if x <= 0:
        return np.int64(trailing_zeros(free)) - x
    if x >= 63:
        return x - (63 - np.int64(leading_zeros(free)))
    right = free >> np.uint64(x)
    left = free & ((np.uint64(1) << np.uint64(x)) - np.uint64(1))
    d = np.int64(64)
    if right:
        d = np.int64(trailing_zeros(right))
    if left:
        d = min(d, x - (63 - np.int64(leading_zeros(left))))
    return d


@njit(**_LEAF)
def _paint_rows_int(asg, live, agg, full, loc, ia, ib, ic, j0, k0, rr, rank, h, m, masks,
                    moff, sxi, syi, szi, hwy, hwz, far, p0, lo1, lo2, m1, m2, free):
    # A large ball in one slab, plane by plane and word column by word column: only the
    # rows that the ball reaches there and that still hold an unassigned voxel (found 64
    # at a time through their live bits) are painted, so a ball over finished rows costs
    # a few word tests per plane, and one over a finished plane (free, its unassigned
    # voxels, which this counts down) one.  Returns how many voxels were assigned.
    tot = 0
    ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
    jc = j0 - lo1
    kc = k0 - lo2
    for i in range(ia, ib + 1):
        dx = (i - ic) * sxi
        rho = rr - dx * dx
        x = i - ic + h  # the disc lies inside an uphill neighbour's disc:
        if rho <= 0 or (masks[moff[m] + (x >> 6)] >> np.uint64(x & 63)) & np.uint64(1):
            continue
        a = i - p0
        if free[a] == 0:
            continue
        got = 0
        hk = _hw(hwz, szi, rho, far)
        for w in range(max(kc - hk, 0) >> 6, (min(kc + hk, m2 - 1) >> 6) + 1):
            c0 = w * 64
            c1 = min(c0 + 64, m2) - 1
            gz = max(c0 - kc, kc - c1, 0) * szi
            rem = rho - gz * gz
            if rem <= 0:
                continue
            hy = _hw(hwy, syi, rem, far)
            bl = max(jc - hy, 0)
            br = min(jc + hy, m1 - 1)
            for u in range(bl >> 6, (br >> 6) + 1):
                bits = _row_bits(live[a, w, u], u, bl, br)
                while bits:
                    jj = u * 64 + trailing_zeros(bits)
                    bits &= bits - np.uint64(1)
                    dy = (jj - jc) * syi
                    # most live rows have no free voxel in the ball's span: the free voxel
                    # nearest to the centre's column decides it, without the span
                    dz = _nearest_free(~asg[a, jj, w] & full[w], kc - c0) * szi
                    if dz * dz >= rho - dy * dy:
                        continue
                    hk2 = _hw(hwz, szi, rho - dy * dy, far)
                    lft = max(kc - hk2, c0)
                    rgt = min(kc + hk2, c1)
                    msk = (ALL << np.uint64(lft & 63)) & (ALL >> np.uint64(63 - (rgt & 63)))
                    got += fill_word(asg, live, agg, full, loc, a, jj, w, msk, rank, True)
        free[a] -= got
        tot += got
    return tot


# Balls of half extent below this along axis 0 have all their planes' bits in one 64-bit
# mask word (2 h + 1 <= 63); their masks come from tables (disc_thresholds, the mask LUT).
ONE_WORD_EXT = 32
# Balls of at least this half extent along axis 0 visit only the rows still unassigned
# (the live rows are tracked only when some ball has TRACK_EXT or more: track).
NODE_EXT = 16
TRACK_EXT = 32


@njit(**_OPTS)
def paint_bits_int(start, lists, ext, ci, cj, ck, r2i, ranks, sxi, syi, szi, hwy, hwz, far,
                   masks, moff, d2, mark, lo0, lo1, lo2, hi0, hi1, hi2, g, track, out, sl0, sl1):
    # paint_bits at integer spacing: every squared length is an exact integer, so the
    # half-widths come from integer tables (hwy[B] = max h with (h*sy)^2 < B, -1 for
    # B <= 0; hwz likewise along axis 2) with no sqrt and no data-dependent loop per
    # row, and a row span of at most two words is tested without a branch per word
    # (longer ones word by word, _any_free) before anything is written.
    # A slice (the ball's disc in one output plane) is skipped when it lies inside the
    # same plane's disc of an "uphill" 26-neighbour q (masks, from disc_skip_masks_bits):
    # q's ball has a larger D2 (or an equal one and a smaller index), so whatever covers
    # q's disc there has a value >= this ball's.  That order is strict, so every
    # skipped disc is covered by a painted one; it skips most rows.  Balls of at least
    # NODE_EXT slices visit only the rows still unassigned (_paint_rows_int).  A slab that
    # lists a ball for at most `mark` of its voxels starts with its background assigned
    # (_mark_background) and counts each plane's unassigned voxels (pfree): a finished
    # plane is skipped in one test, a finished slab stops.
    m0, m1, m2 = out.shape
    ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
    ZERO = np.uint64(0)
    for sl in range(sl0, sl1):
        p0 = lo0 + sl * g
        p1 = min(p0 + g, hi0)
        asg, live, agg, full, loc = _slab_state(p1 - p0, m1, m2)
        if (p1 - p0) * m1 * m2 <= mark * (start[sl + 1] - start[sl]):
            pfree = _mark_background(d2, asg, live, agg, full, p0, lo1, lo2)
        else:  # few balls: the background is left unassigned, read by no one
            pfree = np.full(p1 - p0, m1 * m2, np.int64)
        remaining = pfree.sum()
        for t in range(start[sl], start[sl + 1]):
            if remaining == 0:
                break
            m = lists[t]
            if not _paints_slab(ci, ext, masks, moff, m, p0, p1):
                continue
            rr = r2i[m]
            ic = ci[m]
            j0 = cj[m]
            k0 = ck[m]
            rank = ranks[m]
            h = ext[m]
            ia = max(ic - h, p0)
            ib = min(ic + h, p1 - 1)
            dx = (min(max(ic, ia), ib) - ic) * sxi
            rho = rr - dx * dx
            if rho <= 0:
                continue
            hj = _hw(hwy, syi, rho, far)
            hk = _hw(hwz, szi, rho, far)
            jl = max(j0 - hj, lo1) - lo1
            jr = min(j0 + hj, hi1 - 1) - lo1
            kl = max(k0 - hk, lo2) - lo2
            kr = min(k0 + hk, hi2 - 1) - lo2
            if jl > jr or kl > kr:
                continue
            if track and not _any_rows(agg, 0, j0 - lo1, k0 - lo2, rho, hwy, hwz, far, syi, szi,
                                       m1, m2):
                continue
            if track and h >= NODE_EXT:
                remaining -= _paint_rows_int(asg, live, agg, full, loc, ia, ib, ic, j0, k0, rr,
                                             rank, h, m, masks, moff, sxi, syi, szi, hwy, hwz,
                                             far, p0, lo1, lo2, m1, m2, pfree)
                continue
            for i in range(ia, ib + 1):
                dx = (i - ic) * sxi
                rho = rr - dx * dx
                if rho <= 0:
                    continue
                x = i - ic + h  # the disc lies inside an uphill neighbour's disc
                if (masks[moff[m] + (x >> 6)] >> np.uint64(x & 63)) & np.uint64(1):
                    continue
                a = i - p0
                if pfree[a] == 0:
                    continue
                if track and not _any_rows(live, a, j0 - lo1, k0 - lo2, rho, hwy, hwz, far, syi,
                                           szi, m1, m2):
                    continue
                hj = _hw(hwy, syi, rho, far)
                for adj in range(0, hj + 1):
                    dy = adj * syi
                    hk = _hw(hwz, szi, rho - dy * dy, far)
                    lft = max(k0 - hk, lo2) - lo2
                    rgt = min(k0 + hk, hi2 - 1) - lo2
                    if lft > rgt:
                        continue
                    wl = lft >> 6
                    wr = rgt >> 6
                    jp = j0 + adj - lo1
                    jm = j0 - adj - lo1
                    okp = jp >= 0 and jp < m1
                    okm = adj > 0 and jm >= 0 and jm < m1
                    if wr - wl <= 1:
                        ml = ALL << np.uint64(lft & 63)
                        mr = ALL >> np.uint64(63 - (rgt & 63))
                        if wl == wr:
                            ml &= mr
                            mr = ZERO
                        free = ZERO
                        if okp:
                            free |= (ml & ~asg[a, jp, wl]) | (mr & ~asg[a, jp, wr])
                        if okm:
                            free |= (ml & ~asg[a, jm, wl]) | (mr & ~asg[a, jm, wr])
                        if free == ZERO:
                            continue
                    elif not _any_free(asg, a, jp, jm, okp, okm, lft, rgt):
                        continue
                    got = 0
                    if okp:
                        got += fill_bits(asg, live, agg, full, loc, a, jp, lft, rgt, rank, track)
                    if okm:
                        got += fill_bits(asg, live, agg, full, loc, a, jm, lft, rgt, rank, track)
                    remaining -= got
                    pfree[a] -= got
        _store_slab(loc, out, p0 - lo0)
    return out


# --------------------------------------------------------------------------- hidden discs
_UNKNOWN = -(2**62)


@njit(inline="always", **_OPTS)
def _uphill_best(d2, a, i, j, k, best):
    # The uphill bits of centre (i, j, k) (D2 = a; _uphill_bit, bit 31 set), and best[c] =
    # the largest D2 of its uphill neighbours in class c = (ex + 1) * 4 + |ey| * 2 + |ek|,
    # -1 for a class with none.
    for c in range(12):
        best[c] = -1
    n0, n1, n2 = d2.shape
    up = np.uint32(1 << 31)
    if 0 < i < n0 - 1 and 0 < j < n1 - 1 and 0 < k < n2 - 1:
        # inside the array: all 26 neighbours read, without a branch (the load comes
        # before the test, so that the test compiles to a select)
        for di in range(-1, 2):
            for dj in range(-1, 2):
                for dk in range(-1, 2):
                    v = d2[i + di, j + dj, k + dk]
                    bit = _uphill_bit(a, v, di, dj, dk)
                    up |= bit
                    c = (di + 1) * 4 + abs(dj) * 2 + abs(dk)
                    best[c] = max(best[c], np.int64(v) if bit else np.int64(-1))
        return up
    for di in range(-1, 2):
        for dj in range(-1, 2):
            for dk in range(-1, 2):
                ii = i + di
                jj = j + dj
                kk = k + dk
                if 0 <= ii < n0 and 0 <= jj < n1 and 0 <= kk < n2:
                    v = d2[ii, jj, kk]
                    bit = _uphill_bit(a, v, di, dj, dk)
                    if bit:
                        up |= bit
                        c = (di + 1) * 4 + abs(dj) * 2 + abs(dk)
                        best[c] = max(best[c], np.int64(v))
    return up


@njit(inline="always", **_OPTS)
def _small_mask(best, th, r, h):
    # Bit d + h set when the disc at plane offset d of a ball of rank r + 1 and half extent
    # h < 32 lies inside an uphill neighbour's disc (thresholds th from disc_thresholds).
    mask = np.uint64(0)
    for c in range(12):
        rq = best[c]
        if rq < 0:
            continue
        for x in range(2 * h + 1):
            mask |= np.uint64(rq > th[r, c, x]) << np.uint64(x)
    return mask


@njit(inline="always", **_OPTS)
def _lut_mask(best, a, lut):
    # _small_mask of a ball of D2 = a < lut.shape[0] from the table of
    # _cpu.disc_mask_lut: the class-c neighbours (largest D2 best[c] = a + delta, from
    # _class_best) hide the discs lut[a, c, min(delta, w - 1)]; column w: no neighbour.
    w = lut.shape[2] - 1
    mask = np.uint64(0)
    for c in range(12):
        delta = min(best[c] - a, w - 1)
        mask |= lut[a, c, delta if best[c] >= 0 else w]
    return mask


@njit(**_OPTS)
def _rest_hidden(rq, c, d, rp, sxi, syi, szi):
    # Whether every disc from plane offset d outwards (|d| growing) lies inside the same
    # plane's disc of the uphill neighbour of class c (D2 = rq), a class that points
    # this way (ex = 0 or the sign of d's side).  The lattice disc of rho holds offsets o
    # with |o|^2 <= rho - 1, so need2[t, rho] <= (sqrt(rho - 1) + |e|)^2 and the disc at d'
    # is inside q's when rq > F(d') = rho(d') - 1 + 2|e| sqrt(rho(d') - 1) + |e|^2
    # + ((d' - ex) sx)^2.  Outwards F only decreases for these classes, so F(d) decides
    # them all (a relative margin covers the rounding of sqrt: exact).
    dd = d * sxi
    rho = rp - dd * dd
    if rho < 1:
        return True
    ex = c // 4 - 1
    t = c % 4
    e2 = ((t >> 1) * syi) ** 2 + ((t & 1) * szi) ** 2
    dq = (d - ex) * sxi
    f = rho - 1.0 + 2.0 * math.sqrt(e2) * math.sqrt(rho - 1.0) + e2 + dq * dq
    return rq > f * (1.0 + 1e-12) + 1.0


@njit(**_OPTS)
def _first_rest_hidden(rq, c, d, end, rp, sxi, syi, szi):
    # The first plane offset from d to end (inclusive, either direction) from which
    # _rest_hidden holds, end + 1 step past end if none; it holds from there on, so a
    # search that gallops outwards from d (the plane is often near) and then halves
    # finds it.
    step = 1 if end >= d else -1
    last = (end - d) * step
    lo = 0  # planes d + lo * step ... are searched; the one at hi * step holds
    hi = 0
    while not _rest_hidden(rq, c, d + hi * step, rp, sxi, syi, szi):
        if hi == last:
            return end + step
        lo = hi + 1
        hi = min(2 * hi + 1, last)
    while lo < hi:
        mid = (lo + hi) >> 1
        if _rest_hidden(rq, c, d + mid * step, rp, sxi, syi, szi):
            hi = mid
        else:
            lo = mid + 1
    return d + lo * step


@njit(inline="always", **_OPTS)
def _hiding_classes(best, need2, far, rho, d, sxi):
    # Bit c set when the disc at plane offset d (rho = its squared radius) lies inside the
    # disc of the class-c neighbour (D2 = best[c]): 4 table values serve the 12 classes.
    n = _need4(need2, far, rho)
    hid = np.uint32(0)
    for e in range(3):
        dq = (d - e + 1) * sxi
        for t in range(4):
            hid |= np.uint32(best[e * 4 + t] > n[t] + dq * dq) << np.uint32(e * 4 + t)
    return hid


@njit(inline="always", **_OPTS)
def _behind_reach(rq, rp, sxi):
    # The largest |d| whose disc (plane offset d of a ball of D2 = rp) lies inside the
    # same plane's disc of the neighbour one plane behind it in the same column (D2 = rq):
    # need2[0, rho] <= rho - 1, so every |d| with sx^2 (2|d| + 1) <= rq - rp (-1: none).
    return ((rq - rp) // (sxi * sxi) - 1) // 2


@njit(**_OPTS)
def disc_skip_masks_bits(d2, ci, cj, ck, ext, ranks, vals, th, lut, need2, far, sxi, syi, szi,
                         lo0, hi0, moff, masks, hidden, m0, m1):
    # For centres [m0, m1): bit (d + h) of ball m's mask (words masks[moff[m]:]) is set
    # when the disc at plane offset d lies inside an uphill neighbour's disc or outside
    # the box's planes [lo0, hi0) (it paints nothing there), and hidden[m] = 1 when every
    # disc of the ball is: the ball lies in the union of uphill balls within the box and
    # is not painted.  The test depends on a neighbour only through its
    # class (ex, |ey|*3 + |ek|) and D2(q), and a larger D2(q) contains more, so the
    # largest D2(q) per class (at most 12) decides.  The disc at plane offset d lies inside
    # q's iff D2(q) > need2[t, D2(p) - (d*sx)^2] + ((d-ex)*sx)^2, a threshold that depends
    # only on D2(p) (tabulated by disc_thresholds for balls of < 32 slices).  Hidden balls:
    # the uphill order is strict, so every voxel of a hidden ball is covered by a painted
    # ball of a value at least as large (by induction along the order).
    best = np.empty(12, np.int64)
    first = np.empty(12, np.int64)
    for m in range(m0, m1):
        hidden[m] = 0
        h = ext[m]
        for u in range(moff[m], moff[m + 1]):
            masks[u] = 0
        if h < 0:
            continue
        r = ranks[m] - 1
        a = vals[r]
        # the planes in the box: offsets [dlo, dhi] (the others' bits set here)
        dlo = max(-h, lo0 - ci[m])
        dhi = min(h, hi0 - 1 - ci[m])
        for lft, rgt in ((0, min(dlo - 1, dhi) + h), (max(dhi + 1, dlo) + h, 2 * h)):
            for w in range(lft >> 6, (rgt >> 6) + 1 if lft <= rgt else lft >> 6):
                masks[moff[m] + w] |= _span_word(w, lft, rgt)
        if dlo > dhi:
            hidden[m] = 1
            continue
        _uphill_best(d2, a, ci[m], cj[m], ck[m], best)
        if h < ONE_WORD_EXT and (a < lut.shape[0] or r < th.shape[0]):
            mask = masks[moff[m]] | (_lut_mask(best, a, lut) if a < lut.shape[0]
                                      else _small_mask(best, th, r, h))
            masks[moff[m]] = mask
            if mask == np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(63 - 2 * h):
                hidden[m] = 1
            continue
        # larger balls: the box's planes outwards from 0 (0..dhi, then -1..dlo), each bit
        # set when the disc is hidden (every plane: the painter skips hidden discs after a
        # visible one), and the rest of a side at once from where _rest_hidden holds for
        # the class that hid the disc (first[c], found once per class and side)
        rp = a
        allin = True
        last = 0  # the class that hid the previous disc is tried first
        for side in range(2):
            step = 1 if side == 0 else -1
            d = max(0, dlo) if side == 0 else min(-1, dhi)
            end = dhi if side == 0 else dlo
            for c in range(12):
                first[c] = _UNKNOWN
            while (end - d) * step >= 0:
                x = d + h
                dd = d * sxi
                rho = rp - dd * dd
                # the class that hid the previous disc first, else the first of the others
                # after it (need2 >= 0, so a class without a neighbour, -1, never hides)
                ex = last // 4 - 1
                t = last % 4
                dq = (d - ex) * sxi
                inside = best[last] > _need(need2, far, t, rho) + dq * dq
                if not inside:
                    hid = _hiding_classes(best, need2, far, rho, d, sxi)
                    if hid:
                        rot = ((hid >> np.uint32(last)) | (hid << np.uint32(12 - last)))
                        last = (last + trailing_zeros(rot & np.uint32(0xFFF))) % 12
                        inside = True
                if not inside:
                    allin = False
                    d += step
                    continue
                if (last // 4 - 1) * step >= 0 and first[last] == _UNKNOWN:
                    first[last] = _first_rest_hidden(best[last], last, d, end, rp, sxi, syi, szi)
                if (last // 4 - 1) * step >= 0 and (d - first[last]) * step >= 0:
                    lft = min(d, end) + h
                    rgt = max(d, end) + h
                    for w in range(lft >> 6, (rgt >> 6) + 1):
                        masks[moff[m] + w] |= _span_word(w, lft, rgt)
                    break
                masks[moff[m] + (x >> 6)] |= np.uint64(1) << np.uint64(x & 63)
                d += step
                if last % 4 == 0 and (last // 4 - 1) * step < 0:
                    # the neighbour behind in the same column: its planes set at once
                    reach = min(_behind_reach(best[last], rp, sxi), end * step) * step
                    if (reach - d) * step >= 0:
                        lft = min(d, reach) + h
                        rgt = max(d, reach) + h
                        for w in range(lft >> 6, (rgt >> 6) + 1):
                            masks[moff[m] + w] |= _span_word(w, lft, rgt)
                        d = reach + step
        if allin:
            hidden[m] = 1
    return masks


# --------------------------------------------------------------------------- max painter
# An int64 above any bound of _row_clip (no such neighbour: no row skipped).
_NO_CLIP = 2**52
# paint_max clips the rows of balls at least this many rows from the centre along axis 1
# (smaller ones lose fewer rows than the clip costs: 250^3 PoreSpy blobs at blobiness 2)
ROW_CLIP_MIN = 3
# paint_max's row window (voxels): rows of the balls it paints (radius < MAX_PAINT_RADIUS
# = 16 finest weights) span at most 2 * 15 + 1 voxels
ROW_WINDOW = 32


@njit(inline="always", **_OPTS)
def _floor_div(x, d, inv):
    # x // d for integers |x| < 2^53 and d > 0 (inv = 1 / d): a float estimate corrected
    # exactly (cheaper than an integer division).
    q = np.int64(math.floor(x * inv))
    q += np.int64((q + 1) * d <= x)
    q -= np.int64(q * d > x)
    return q


@njit(inline="always", **_OPTS)
def _row_clip(d2, bits, i, j, k, a, sxi, syi, t):
    # t[di + 1] (dj = +1) and t[di + 4] (dj = -1): a - 1 + |e|^2 - D2(q) for the uphill
    # neighbours q = p + e, e = (di, dj, 0), _NO_CLIP for the others.  Every offset o of p's
    # ball has |o|^2 <= a - 1 (integers), so |o - e|^2 < D2(q) where 2 o.e > t: the rows of
    # p's ball in that half-plane lie in q's ball.  Returns whether any was uphill.
    any_up = False
    for di in range(-1, 2):
        for s in range(2):
            dj = 1 - 2 * s
            n = (di + 1) * 9 + (dj + 1) * 3 + 1
            on = (bits >> np.uint32(n)) & np.uint32(1)
            # read before the test (a select, not a branch), clamped to the array: an
            # uphill neighbour is inside it, so the clamp changes only unused reads
            ii = min(max(i + di, 0), d2.shape[0] - 1)
            jj = min(max(j + dj, 0), d2.shape[1] - 1)
            bound = a - 1 + (di * sxi) ** 2 + syi * syi - np.int64(d2[ii, jj, k])
            t[3 * s + di + 1] = bound if on else _NO_CLIP
            any_up |= on != 0
    return any_up


@njit(inline="always", **_OPTS)
def _clip_rows(half, clip, di, sxi, syi, hmax):
    # The row offsets [jlo, jhi] (within [-hmax, hmax]) of the plane at offset di that lie in
    # no uphill half-plane of _row_clip (half; all of them unless clip): a row dJ lies in
    # one when 2 (sx^2 di ei + sy^2 dJ dj) > half[...] for its neighbour e = (ei, dj, 0).
    if not clip:
        return -hmax, hmax
    wy = 2 * syi * syi
    inv = 1.0 / wy
    x0 = 2 * di * sxi * sxi
    below = -(hmax + 1) * wy  # any bound below it leaves no row: kept within _floor_div's range
    jhi = hmax
    up = min(half[0] + x0, half[1], half[2] - x0)
    if up < hmax * wy:
        jhi = _floor_div(max(up, below), wy, inv)
    jlo = -hmax
    down = min(half[3] + x0, half[4], half[5] - x0)
    if down < hmax * wy:
        jlo = -_floor_div(max(down, below), wy, inv)
    return jlo, jhi


@njit(**_LEAF)
def paint_max(d2, cand, r2c, r2lim, rank_lut, vals, hwx, hwy, hwz, far, th, lut, sxi, syi, szi,
              lo0, lo1, lo2, hi0, hi1, hi2, hmax, out, work, q0, q1):
    # Output planes [q0, q1) of the box: out = max(out, rank) (out uint8, uint16 or uint32)
    # over the visible discs of the centres with D2 < r2lim (half extents <= hmax along
    # axis 0).  Max is order-free, so no sort and no slab lists: the centres (sorted flat
    # indices) whose ball reaches these planes are one range of cand, read in memory order,
    # their D2 from r2c.  A disc inside an uphill neighbour's disc (_small_mask) is
    # skipped, as in paint_bits_int: every skipped disc is covered by a painted one of a
    # value at least as large.  d2 may be saturated (prune's d2sat, an eighth of the
    # bytes): a neighbour read below its D2 is at worst taken as not uphill or as a
    # smaller ball, which hides fewer discs and clips fewer rows.  Squared lengths past
    # the tables (far an array): ranks by a search of vals, half-widths by _hw.  work:
    # (planes, 18) int64, row q0 this task's (nothing allocated: no reference counting).
    n0, n1, n2 = d2.shape
    s0, s1, s2 = out.shape
    flat = out.reshape(-1)
    p0 = lo0 + q0
    p1 = lo0 + q1
    m0 = np.searchsorted(cand, max(p0 - hmax, 0) * n1 * n2)
    m1 = np.searchsorted(cand, min(p1 + hmax, n0) * n1 * n2)
    zero = _rank(flat, 0)
    best = work[q0, :12]
    half = work[q0, 12:]
    # rows are painted through a window of ROW_WINDOW voxels where it fits in a row (and
    # holds every row: 2 hmax_z + 1 <= ROW_WINDOW, hmax_z the largest half-width along
    # axis 2)
    window = s2 >= ROW_WINDOW and 2 * _hw(hwz, szi, r2lim - 1, far) + 1 <= ROW_WINDOW
    # the centres are sorted: (i, j) are divided out only when the row changes
    rb = np.int64(-n2)  # flat index of the current row's first voxel
    i = np.int64(0)
    j = np.int64(0)
    for m in range(m0, m1):
        p = cand[m]
        if p - rb >= n2:
            row = p // n2
            rb = row * n2
            i = row // n1
            j = row - i * n1
        k = p - rb
        a = r2c[m]
        if a >= r2lim:
            continue
        h = _hw(hwx, sxi, a, far)
        ia = max(i - h, p0)
        ib = min(i + h, p1 - 1)
        if ia > ib:
            continue
        r = rank_lut[a] if a < rank_lut.size else np.searchsorted(vals, a, side="right")
        up = _uphill_best(d2, a, i, j, k, best)
        if a < lut.shape[0]:
            mask = _lut_mask(best, a, lut)
        else:
            mask = _small_mask(best, th, r - 1, h)
        rank = _rank(flat, r)
        jp, jm, kp, km = _face_uphill(up)  # rows held by those neighbours are skipped
        clip = _hw(hwy, syi, a, far) >= ROW_CLIP_MIN and _row_clip(d2, up, i, j, k, a, sxi, syi,
                                                                  half)
        # the visible planes' bits (d + h for plane offset d) within [ia, ib]
        span = np.uint64(ib - ia + 1)
        todo = ~mask & ((np.uint64(2) << (span - np.uint64(1))) - np.uint64(1)) << np.uint64(ia - i + h)
        while todo:
            ii = i - h + np.int64(trailing_zeros(todo))
            todo &= todo - np.uint64(1)
            dx = (ii - i) * sxi
            rho = a - dx * dx
            hj = _hw(hwy, syi, rho, far)
            jlo, jhi = _clip_rows(half, clip, ii - i, sxi, syi, hj)
            if jp:
                jhi = min(jhi, 0)
            if jm:
                jlo = max(jlo, 0)
            for jj in range(max(j + jlo, lo1), min(j + jhi, hi1 - 1) + 1):
                dy = (jj - j) * syi
                hk = _hw(hwz, szi, rho - dy * dy, far)
                row = ((ii - lo0) * s1 + (jj - lo1)) * s2
                k0 = k + hk if km else k - hk
                k1 = k - hk if kp else k + hk
                c0 = max(k0, lo2) - lo2  # the row's columns [c0, c1] in the box
                c1 = min(k1, hi2 - 1) - lo2
                # unsigned positions: numba then adds no negative-index wrap, and the
                # loops vectorise
                if window:
                    # a fixed window of the row, its lanes outside [c0, c1] maxed with 0:
                    # no branch on the row's length (most rows are a few voxels)
                    w0 = min(c0, s2 - ROW_WINDOW)
                    lft = c0 - w0
                    rgt = c1 - w0
                    for t in range(ROW_WINDOW):
                        u = np.uint64(row + w0) + np.uint64(t)
                        flat[u] = max(flat[u], rank if (lft <= t) & (t <= rgt) else zero)
                    continue
                for t in range(c1 + 1 - c0):
                    u = np.uint64(row + c0) + np.uint64(t)
                    flat[u] = max(flat[u], rank)
    return out


@njit(**_OPTS)
def take(flat, idx, out, m0, m1):
    # out[m] = flat[idx[m]] for m in [m0, m1): numpy's take, by ranges.
    for m in range(m0, m1):
        out[m] = flat[idx[m]]


@njit(**_OPTS)
def take_unsaturated(flat, sat, idx, out, m0, m1):
    # out[m] = flat[idx[m]] for m in [m0, m1), read from sat (flat saturated to its integer
    # type, prune's d2sat) where it is below its largest value.
    top = np.iinfo(sat.dtype).max
    for m in range(m0, m1):
        q = idx[m]
        v = sat[q]
        out[m] = v if v < top else flat[q]


@njit(**_OPTS)
def finish_lut(ranks, lut, out, i0, i1):
    # out = lut[ranks] for planes [i0, i1).
    n0, n1, n2 = ranks.shape
    for i in range(i0, i1):
        for j in range(n1):
            for k in range(n2):
                out[i, j, k] = lut[ranks[i, j, k]]
    return out
