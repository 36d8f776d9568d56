"""numba kernels of exact local thickness, at module level so numba's disk cache finds them.

Imported lazily by :mod:`volsweep.thickness._cpu` (the GPU path needs no numba).
Lengths are squared lattice lengths (integer weights, exact in float64).
"""

import math

import numpy as np
from numba import njit, prange
from numba.cpython.unsafe.numbers import trailing_zeros


@njit(cache=True, parallel=True)
def edt_axis0(phase, sx, out):
    # Two scans along axis 0 per (j, k) line: distance to the nearest background
    # voxel in index units, then the canonical first term (t*sx)*(t*sx).
    n0, n1, n2 = phase.shape
    inf = np.inf
    for j in prange(n1):
        last = np.full(n2, -1, np.int64)
        for i in range(n0):
            for k in range(n2):
                if not phase[i, j, k]:
                    last[k] = i
                out[i, j, k] = inf if last[k] < 0 else float(i - last[k])
        nxt = np.full(n2, -1, np.int64)
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



@njit(cache=True, parallel=True)
def prune(d2, sx, sy, sz, eps, lo0, lo1, lo2, hi0, hi1, hi2, r2keep, levels, need, r2cap,
          levlut, out):
    # out[p] != 0 for the centres kept: D(p) > 0, within r2keep of the box [lo, hi),
    # and whose ball is not inside a 26-neighbour q's ball.  For D2(p) < r2cap the
    # test is exact and discrete: the ball {o: |o|^2 < a} shifted by e lies in
    # {o: |o|^2 < b} iff b > need[type(e), level(a)] (the max of |o + e|^2 over the
    # ball); beyond the table, the continuous D(q) >= D(p) + |e| in squared form.
    n0, n1, n2 = d2.shape
    for i in prange(n0):
        gi = 0
        if i < lo0:
            gi = lo0 - i
        elif i >= hi0:
            gi = i - hi0 + 1
        for j in range(n1):
            gj = 0
            if j < lo1:
                gj = lo1 - j
            elif j >= hi1:
                gj = j - hi1 + 1
            for k in range(n2):
                out[i, j, k] = 0
                a = d2[i, j, k]
                if not a > 0.0:
                    continue
                gk = 0
                if k < lo2:
                    gk = lo2 - k
                elif k >= hi2:
                    gk = k - hi2 + 1
                x = gi * sx
                y = gj * sy
                z = gk * sz
                g = (x * x + y * y) + z * z
                if not g < r2keep:
                    continue
                keep = True
                up = np.uint32(0)
                if a != np.inf:
                    lev = -1
                    if a < r2cap:
                        if a < levlut.size:
                            # integer spacing: a is an exact integer (no binary search)
                            lev = levlut[int(a)]
                        else:
                            lev = np.searchsorted(levels, a, side="left") - 1
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
                                # q comes before p in the strict order (D2 descending, flat
                                # index ascending): an "uphill" neighbour for paint_bits_int
                                if b > a or (b == a and (di < 0 or (di == 0 and (
                                        dj < 0 or (dj == 0 and dk < 0))))):
                                    up |= np.uint32(1) << np.uint32((di + 1) * 9 + (dj + 1) * 3
                                                                    + (dk + 1))
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
                    out[i, j, k] = up | np.uint32(1 << 31)
    return out

@njit(cache=True, inline="always")
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

@njit(cache=True, inline="always")
def shrink(h, base, r2, s):
    # Largest h' <= h with base + (h'*s)^2 < r2 (monotone: callers pass an upper bound).
    while h >= 0:
        t = h * s
        if base + t * t < r2:
            break
        h -= 1
    return h

@njit(cache=True, inline="always")
def fill_bits(asg, out, a, b, oi, lft, rgt, rank):
    # Give the still unassigned voxels of [lft, rgt] in row b of slab plane a the value
    # rank; asg holds one bit per voxel (1 = assigned), so a covered span costs one or
    # two word tests.
    wl = lft >> 6
    wr = rgt >> 6
    for w in range(wl, wr + 1):
        m = np.uint64(0xFFFFFFFFFFFFFFFF)
        if w == wl:
            m &= np.uint64(0xFFFFFFFFFFFFFFFF) << np.uint64(lft & 63)
        if w == wr:
            m &= np.uint64(0xFFFFFFFFFFFFFFFF) >> np.uint64(63 - (rgt & 63))
        free = m & ~asg[a, b, w]
        if free:
            asg[a, b, w] |= free
            base = w << 6
            while free:
                out[oi, b, base + trailing_zeros(free)] = rank
                free &= free - np.uint64(1)


@njit(cache=True, parallel=True)
def paint_bits(start, lists, ext, ci, cj, ck, r2s, ranks, sx, sy, sz, lo0, lo1, lo2,
               hi0, hi1, hi2, g, out):
    # Balls in decreasing rank, per slab of g output planes: the first ball to reach a
    # voxel has the largest rank among those covering it, so it is written once and
    # marked in a bitmask (one uint64 word per 64 voxels of a row).  A ball row whose
    # voxels are all assigned costs one or two word tests; half-widths shrink
    # monotonically, so there is one sqrt per ball slice, none per row.  Each slab
    # belongs to one thread, and the result does not depend on the order of equal
    # ranks, so it is the same for any number of threads.
    m0, m1, m2 = out.shape
    nslab = start.size - 1
    nw = (m2 + 63) >> 6
    for sl in prange(nslab):
        p0 = lo0 + sl * g
        p1 = min(p0 + g, hi0)
        asg = np.zeros((p1 - p0, m1, nw), np.uint64)
        for t in range(start[sl], start[sl + 1]):
            m = lists[t]
            r2 = r2s[m]
            ic = ci[m]
            j0 = cj[m]
            k0 = ck[m]
            rank = ranks[m]
            h = ext[m]
            for i in range(max(ic - h, p0), min(ic + h, p1 - 1) + 1):
                x = (i - ic) * sx
                aa = x * x
                if not aa < r2:
                    continue
                a = i - p0
                oi = i - lo0
                hj = half(aa, r2, sy)
                hk = half(aa, r2, sz)
                for adj in range(0, hj + 1):
                    y = adj * sy
                    hk = shrink(hk, aa + y * y, r2, sz)
                    if hk < 0:
                        break
                    lft = max(k0 - hk, lo2) - lo2
                    rgt = min(k0 + hk, hi2 - 1) - lo2
                    if lft > rgt:
                        continue
                    jj = j0 + adj
                    if jj >= lo1 and jj < hi1:
                        fill_bits(asg, out, a, jj - lo1, oi, lft, rgt, rank)
                    if adj > 0:
                        jj = j0 - adj
                        if jj >= lo1 and jj < hi1:
                            fill_bits(asg, out, a, jj - lo1, oi, lft, rgt, rank)
    return out


@njit(cache=True, inline="always")
def row_free(asg, a, b, wl, wr, ml, mr):
    # Unassigned voxels of a span covering words wl (mask ml) and wr (mask mr, 0 when
    # wr == wl) of row b, slab plane a: nonzero when some voxel still needs a value.
    return (ml & ~asg[a, b, wl]) | (mr & ~asg[a, b, wr])


@njit(cache=True, parallel=True)
def paint_bits_int(start, lists, ext, ci, cj, ck, r2i, ranks, sxi, syi, hwy, hwz, ustart,
                   ucode, need2, skipm, lo0, lo1, lo2, hi0, hi1, hi2, g, out):
    # paint_bits at integer spacing: every squared length is an exact integer, so the
    # half-widths come from integer tables (hwy[B] = max h with (h*sy)^2 < B, -1 for
    # B <= 0; hwz likewise along axis 2) with no sqrt and no data-dependent loop per
    # row, and a row span of at most two words is tested without a branch per word.
    # A slice (the ball's disc in one output plane) is skipped when it lies inside the
    # same plane's disc of an "uphill" 26-neighbour q (ucode, from uphill_lists): q's
    # ball has a larger D2 (or an equal one and a smaller index), so whatever covers
    # q's disc there has a value >= this ball's.  That order is strict, so every
    # skipped disc is covered by a painted one; it skips most rows.
    m0, m1, m2 = out.shape
    nslab = start.size - 1
    nw = (m2 + 63) >> 6
    ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
    ZERO = np.uint64(0)
    for sl in prange(nslab):
        p0 = lo0 + sl * g
        p1 = min(p0 + g, hi0)
        asg = np.zeros((p1 - p0, m1, nw), np.uint64)
        for t in range(start[sl], start[sl + 1]):
            m = lists[t]
            rr = r2i[m]
            ic = ci[m]
            j0 = cj[m]
            k0 = ck[m]
            rank = ranks[m]
            h = ext[m]
            for i in range(max(ic - h, p0), min(ic + h, p1 - 1) + 1):
                dx = (i - ic) * sxi
                rho = rr - dx * dx
                if rho <= 0:
                    continue
                if h < 32:
                    # precomputed by disc_skip_masks
                    if (skipm[m] >> np.uint64(i - ic + h)) & np.uint64(1):
                        continue
                inside = False
                for u in range(ustart[m], ustart[m + 1] if h >= 32 else ustart[m]):
                    code = ucode[u]
                    e = code & 31
                    ex = e // 9 - 1
                    dq = (i - ic - ex) * sxi
                    if (code >> 5) - dq * dq > need2[e % 9, rho]:
                        inside = True
                        break
                if inside:
                    continue
                a = i - p0
                oi = i - lo0
                hj = hwy[rho]
                for adj in range(0, hj + 1):
                    dy = adj * syi
                    hk = hwz[rho - dy * dy]
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
                            free |= row_free(asg, a, jp, wl, wr, ml, mr)
                        if okm:
                            free |= row_free(asg, a, jm, wl, wr, ml, mr)
                        if free == ZERO:
                            continue
                    if okp:
                        fill_bits(asg, out, a, jp, oi, lft, rgt, rank)
                    if okm:
                        fill_bits(asg, out, a, jm, oi, lft, rgt, rank)
    return out


@njit(cache=True, inline="always")
def _uphill(d2, ci, cj, ck, m, n1, n2, ucode, pos, write):
    # The 26-neighbours q of centre m that come first in the strict order
    # (D2 descending, flat index ascending); code = D2(q) * 32 + e with
    # e = (ex + 1) * 9 + (|ey| * 3 + |ek|) (the in-plane part folded by symmetry).
    n0 = d2.shape[0]
    i0 = ci[m]
    j0 = cj[m]
    k0 = ck[m]
    rp = d2[i0, j0, k0]
    me = (i0 * n1 + j0) * n2 + k0
    cnt = 0
    for ex in range(-1, 2):
        ii = i0 + ex
        if ii < 0 or ii >= n0:
            continue
        for ey in range(-1, 2):
            jj = j0 + ey
            if jj < 0 or jj >= n1:
                continue
            for ek in range(-1, 2):
                kk = k0 + ek
                if kk < 0 or kk >= n2 or (ex == 0 and ey == 0 and ek == 0):
                    continue
                b = d2[ii, jj, kk]
                if b > rp or (b == rp and (ii * n1 + jj) * n2 + kk < me):
                    if write:
                        ucode[pos + cnt] = np.int64(b) * 32 + (ex + 1) * 9 + abs(ey) * 3 + abs(ek)
                    cnt += 1
    return cnt


@njit(cache=True, parallel=True)
def uphill_lists(d2, ci, cj, ck):
    # CSR lists (ustart, ucode) of every centre's uphill neighbours (see paint_bits_int).
    n = ci.size
    n1 = d2.shape[1]
    n2 = d2.shape[2]
    cnt = np.zeros(n + 1, np.int64)
    dummy = np.zeros(1, np.int64)
    for m in prange(n):
        cnt[m + 1] = _uphill(d2, ci, cj, ck, m, n1, n2, dummy, 0, False)
    for m in range(n):
        cnt[m + 1] += cnt[m]
    ucode = np.empty(cnt[n], np.int64)
    for m in prange(n):
        _uphill(d2, ci, cj, ck, m, n1, n2, ucode, cnt[m], True)
    return cnt, ucode


@njit(cache=True, parallel=True)
def uphill_from_bits(d2, ci, cj, ck, bits):
    # uphill_lists from prune's neighbour bits: one read of d2 per listed neighbour.
    n = ci.size
    cnt = np.zeros(n + 1, np.int64)
    for m in prange(n):
        v = bits[m] & np.uint32(0x7FFFFFF)
        c = 0
        while v:
            v &= v - np.uint32(1)
            c += 1
        cnt[m + 1] = c
    for m in range(n):
        cnt[m + 1] += cnt[m]
    ucode = np.empty(cnt[n], np.int64)
    for m in prange(n):
        v = bits[m] & np.uint32(0x7FFFFFF)
        pos = cnt[m]
        while v:
            t = trailing_zeros(v)
            v &= v - np.uint32(1)
            di = t // 9 - 1
            dj = (t // 3) % 3 - 1
            dk = t % 3 - 1
            b = d2[ci[m] + di, cj[m] + dj, ck[m] + dk]
            ucode[pos] = np.int64(b) * 32 + (di + 1) * 9 + abs(dj) * 3 + abs(dk)
            pos += 1
    return cnt, ucode


@njit(cache=True, parallel=True)
def disc_skip_masks(ext, r2i, ustart, ucode, need2, sxi):
    # For balls with at most 63 slices: bit (dx + h) set when the disc at plane offset dx
    # lies inside an uphill neighbour's disc (the test of paint_bits_int, done here once
    # per ball).
    n = ext.size
    out = np.zeros(n, np.uint64)
    for m in prange(n):
        h = ext[m]
        if h < 0 or h >= 32:
            continue
        rp = r2i[m]
        mask = np.uint64(0)
        for u in range(ustart[m], ustart[m + 1]):
            code = ucode[u]
            e = code & 31
            ex = e // 9 - 1
            t = e % 9
            rq = code >> 5
            for d in range(-h, h + 1):
                dd = d * sxi
                dq = (d - ex) * sxi
                c = rq - dq * dq > need2[t, rp - dd * dd]
                mask |= np.uint64(c) << np.uint64(d + h)
        out[m] = mask
    return out


@njit(cache=True, parallel=True)
def disc_skip_masks_bits(d2, ci, cj, ck, bits, ext, ranks, vals, need2, sxi):
    # disc_skip_masks straight from prune's neighbour bits: the test depends on a
    # neighbour only through its class (ex, |ey|*3 + |ek|) and D2(q), and a larger D2(q)
    # contains more, so the largest D2(q) per class (at most 12) decides.  The disc at
    # plane offset d lies inside q's iff D2(q) > need2[t, D2(p) - (d*sx)^2] + ((d-ex)*sx)^2,
    # a threshold that depends only on D2(p) (vals[rank - 1]): tabulated per distinct value.
    n = ci.size
    nv = vals.size
    th = np.zeros((nv, 12, 64), np.int64)
    for r in prange(nv):
        rp = vals[r]
        h = ext_of(rp, sxi)
        if h >= 32:
            continue
        for c in range(12):
            ex = c // 4 - 1
            t = c % 4
            tt = (t >> 1) * 3 + (t & 1)
            for d in range(-h, h + 1):
                dd = d * sxi
                dq = (d - ex) * sxi
                th[r, c, d + h] = need2[tt, rp - dd * dd] + dq * dq
    out = np.zeros(n, np.uint64)
    chunk = 4096  # one work buffer per chunk of centres, not per centre
    for c0 in prange((n + chunk - 1) // chunk):
        best = np.empty(12, np.int64)
        for m in range(c0 * chunk, min(n, (c0 + 1) * chunk)):
            h = ext[m]
            if h < 0 or h >= 32:
                continue
            best[:] = -1
            v = bits[m] & np.uint32(0x7FFFFFF)
            while v:
                t = trailing_zeros(v)
                v &= v - np.uint32(1)
                di = t // 9 - 1
                dj = (t // 3) % 3 - 1
                dk = t % 3 - 1
                b = np.int64(d2[ci[m] + di, cj[m] + dj, ck[m] + dk])
                c = (di + 1) * 4 + abs(dj) * 2 + abs(dk)
                if b > best[c]:
                    best[c] = b
            r = ranks[m] - 1
            mask = np.uint64(0)
            for c in range(12):
                rq = best[c]
                if rq < 0:
                    continue
                for x in range(2 * h + 1):
                    mask |= np.uint64(rq > th[r, c, x]) << np.uint64(x)
            out[m] = mask
    return out


@njit(cache=True, inline="always")
def ext_of(r2, sxi):
    # half(0, r2, sx) at integer spacing: the largest h with (h*sx)^2 < r2, -1 if none.
    h = np.int64(math.sqrt(r2) / sxi) + 1
    while h >= 0 and (h * sxi) * (h * sxi) >= r2:
        h -= 1
    return h


@njit(cache=True, parallel=True)
def edt_axis12(fin, sy, sz, out):
    # The distance passes along axes 1 then 2, one plane i at a time through a plane buffer (one pass
    # over the volume instead of two; same operations in the same order).
    n0, n1, n2 = fin.shape
    for i in prange(n0):
        buf = np.empty((n1, n2), np.float64)
        for j in range(n1):
            for k in range(n2):
                best = fin[i, j, k]
                t = 1
                while True:
                    ts = t * sy
                    c = ts * ts
                    if c >= best:
                        break
                    any_ = False
                    if j - t >= 0:
                        v = fin[i, j - t, k] + c
                        if v < best:
                            best = v
                        any_ = True
                    if j + t < n1:
                        v = fin[i, j + t, k] + c
                        if v < best:
                            best = v
                        any_ = True
                    if not any_:
                        break
                    t += 1
                buf[j, k] = best
        for j in range(n1):
            for k in range(n2):
                best = buf[j, k]
                t = 1
                while True:
                    ts = t * sz
                    c = ts * ts
                    if c >= best:
                        break
                    any_ = False
                    if k - t >= 0:
                        v = buf[j, k - t] + c
                        if v < best:
                            best = v
                        any_ = True
                    if k + t < n2:
                        v = buf[j, k + t] + c
                        if v < best:
                            best = v
                        any_ = True
                    if not any_:
                        break
                    t += 1
                out[i, j, k] = best
    return out



@njit(cache=True, parallel=True)
def slab_lists_par(ci, r2s, ranks, nvals, sx, lo0, hi0, g):
    # Per slab of g output planes, the centres whose ball reaches it, in decreasing rank
    # (each slab scans the centres in parallel with the others).
    n = ranks.size
    cnt = np.zeros(nvals + 2, np.int64)
    for m in range(n):
        cnt[ranks[m]] += 1
    pos = np.empty(nvals + 2, np.int64)
    s = 0
    for r in range(nvals + 1, -1, -1):
        pos[r] = s
        s += cnt[r]
    order = np.empty(n, np.int64)
    for m in range(n):
        r = ranks[m]
        order[pos[r]] = m
        pos[r] += 1
    ext = np.empty(n, np.int64)
    # each ball's plane range [a, b] in rank order (empty when a > b), read sequentially
    # by every slab below
    pa = np.empty(n, np.int64)
    pb = np.empty(n, np.int64)
    for t in prange(n):
        m = order[t]
        h = half(0.0, r2s[m], sx)
        ext[m] = h
        pa[t] = ci[m] - h if h >= 0 else hi0
        pb[t] = ci[m] + h if h >= 0 else lo0 - 1
    nslab = (hi0 - lo0 + g - 1) // g
    start = np.zeros(nslab + 1, np.int64)
    for sl in prange(nslab):
        p0 = lo0 + sl * g
        p1 = min(p0 + g, hi0) - 1
        c = 0
        for t in range(n):
            if pa[t] <= p1 and pb[t] >= p0:
                c += 1
        start[sl + 1] = c
    for sl in range(nslab):
        start[sl + 1] += start[sl]
    lists = np.empty(start[nslab], np.int64)
    for sl in prange(nslab):
        p0 = lo0 + sl * g
        p1 = min(p0 + g, hi0) - 1
        f = start[sl]
        for t in range(n):
            if pa[t] <= p1 and pb[t] >= p0:
                lists[f] = order[t]
                f += 1
    return start, lists, ext


@njit(cache=True, parallel=True)
def kept_centres(mask):
    # np.flatnonzero(mask) and mask's values there, in parallel over planes.
    n0, n1, n2 = mask.shape
    cnt = np.zeros(n0 + 1, np.int64)
    for i in prange(n0):
        c = 0
        for j in range(n1):
            for k in range(n2):
                if mask[i, j, k] != 0:
                    c += 1
        cnt[i + 1] = c
    for i in range(n0):
        cnt[i + 1] += cnt[i]
    cand = np.empty(cnt[n0], np.int64)
    vals = np.empty(cnt[n0], mask.dtype)
    for i in prange(n0):
        f = cnt[i]
        for j in range(n1):
            for k in range(n2):
                v = mask[i, j, k]
                if v != 0:
                    cand[f] = (i * n1 + j) * n2 + k
                    vals[f] = v
                    f += 1
    return cand, vals


@njit(cache=True, parallel=True)
def finish_lut(ranks, lut, out):
    # out = lut[ranks], in parallel over planes.
    n0, n1, n2 = ranks.shape
    for i in prange(n0):
        for j in range(n1):
            for k in range(n2):
                out[i, j, k] = lut[ranks[i, j, k]]
    return out


@njit(cache=True, parallel=True)
def finite_max(a):
    # max of the finite values of a 3D array (0.0 when there is none), in parallel.
    n0 = a.shape[0]
    part = np.zeros(n0, np.float64)
    for i in prange(n0):
        m = 0.0
        for j in range(a.shape[1]):
            for k in range(a.shape[2]):
                v = a[i, j, k]
                if v > m and v != np.inf:
                    m = v
        part[i] = m
    return part.max() if n0 else 0.0


@njit(cache=True, parallel=True)
def zero_fill(out):
    for i in prange(out.shape[0]):
        out[i] = 0
    return out
