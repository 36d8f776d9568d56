"""The embedded demo recovers its own truth: fibre orientations and thickness peaks."""

import numpy as np
import pytest
import yaml

import volsweep
from volsweep.config import angle_values, validate_config, volume_entries
from volsweep.io.readers import open_volume
from volsweep.engine.products import dominant_orientation
from volsweep.synthetic import fibre_direction


@pytest.fixture(scope="module")
def demo():
    cfg = validate_config(yaml.safe_load(open("config.yaml")))
    entry = volume_entries(cfg)["demo"]
    return cfg, entry, np.asarray(open_volume(entry, "demo"))


def axis_angle(u, v):
    """Angle between two axes (u and -u are the same axis)."""
    return float(np.arccos(np.clip(abs(np.dot(u, v)), 0, 1)))


def test_dominant_orientations_are_the_fibres(demo):
    cfg, entry, vol = demo
    sw = cfg["sweep"]
    theta, phi = angle_values(sw["theta"]), angle_values(sw["phi"])
    step = max(np.pi / len(theta), np.pi / len(phi))
    elongated = [x for x in sw["xi"] if x > 1]  # wavelets longer than wide look for fibres
    ds = volsweep.sweep(vol, theta, phi, elongated, a=sw["a"], spacing=entry["spacing"],
                        mode=sw["mode"], device="cpu", progress=False)
    dom = dominant_orientation(ds)
    truths = [fibre_direction(f["theta"], f["phi"]) for f in entry["synthetic"]["fibres"]]
    found = set()
    for t, p in zip(dom["dominant_theta"].values, dom["dominant_phi"].values):
        angles = [axis_angle(fibre_direction(t, p), u) for u in truths]
        assert min(angles) <= step + 1e-9, (t, p, angles)
        found.add(int(np.argmin(angles)))
    assert found == set(range(len(truths))), "every fibre family is the dominant one at some xi"


def test_thickness_histogram_peaks_at_fibre_and_pore_diameters(demo):
    cfg, entry, vol = demo
    th = cfg["thickness"]
    from volsweep.phase import resolve_threshold
    from volsweep.thickness import select_phase

    threshold = th["threshold"] if th["threshold"] is None else resolve_threshold(vol, th["threshold"])
    phase = select_phase(vol, threshold=threshold, label=th.get("label"), invert=th.get("invert", False),
                         name="demo")  # the config's threshold may be a rule (otsu, li, yen)
    lt = volsweep.local_thickness(phase, spacing=entry["spacing"], device="cpu")
    ds = volsweep.thickness_distribution(lt, bins=th["bins"], spacing=entry["spacing"])
    fibre_d = {2 * f["radius"] for f in entry["synthetic"]["fibres"]}
    pore_d = {2 * p["radius"] for p in entry["synthetic"]["pores"]}
    assert len(fibre_d) == len(pore_d) == 1
    (fibre_d,), (pore_d,) = fibre_d, pore_d
    centres, mass = ds["diameter"].values, ds["voxel_count"].values
    voxel = min(entry["spacing"])
    split = (fibre_d + pore_d) / 2
    for lo, hi, truth in ((0, split, fibre_d), (split, np.inf, pore_d)):
        sel = (centres >= lo) & (centres < hi)
        peak = centres[sel][np.argmax(mass[sel])]
        assert abs(peak - truth) <= voxel, (truth, peak)
