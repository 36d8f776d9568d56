"""Hostile and mistaken inputs, refused by validate_config before any job, one line each.

Each case builds a tiny project in a fresh folder (a config dict, data files),
validates it as the Snakefile does, and checks the exact line the user sees,
that it is the only one, and that nothing was written.  A representative
subset of the same categories runs through the Snakemake CLI in
tests/test_bad_inputs.py.
"""

import copy
import os
import time

import h5py
import numcodecs
import numpy as np
import pytest
import tifffile
import zarr

from volsweep.config import ConfigError, validate_config, volume_entries
from volsweep.io.readers import open_volume, source_metadata

SHAPE = (9, 11, 7)
BASE = {
    "volumes": {"v": {"path": "data/v.npy", "format": "npy"}},
    "device": "cpu",
    "ingest_buffer_mb": 1,
    "storage": {"chunks": [4, 4, 4], "shards": [8, 8, 8]},
    "sweep": {"enabled": False, "theta": {"num": 2}, "phi": {"num": 1}, "xi": [1.0]},
    "thickness": {"enabled": False, "threshold": 0.5, "chunk": [8, 8, 8]},
    "report": {"enabled": False},
}
CASES = {}


def case(fn):
    CASES[fn.__name__.removeprefix("case_")] = fn
    return fn


def cfg(**patch):
    out = copy.deepcopy(BASE)
    for key, value in patch.items():
        node, parts = out, key.split("__")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def vol(**entry):
    return cfg(volumes={"v": entry})


def good(work):
    data = np.random.default_rng(7).random(SHAPE).astype(np.float32)
    np.save(work / "data" / "v.npy", data)
    return data


def sweep_on(**patch):
    c = cfg(sweep__enabled=True, **patch)
    return c


# --- names -------------------------------------------------------------------------------
NAME_RULE = ("the volume name may hold only letters, digits, '_', '.' and '-', starting with a "
             "letter or digit (no path separators, wildcards, braces or spaces)")


@pytest.mark.parametrize("name", ["../x", "a/b", "{vol}", "a*b", " space", "a b"])
def test_names_with_path_or_wildcard_characters_are_refused(tmp_path, name):
    (tmp_path / "data").mkdir()
    good(tmp_path)
    c = cfg(volumes={name: {"path": "data/v.npy", "format": "npy"}})
    with pytest.raises(ConfigError) as err:
        validate_config(c, "my.yaml", base_dir=tmp_path)
    assert err.value.lines == [f"my.yaml: volumes.{name[:120]!r}: {NAME_RULE}"]


@case
def case_reserved_name(work):
    good(work)
    return cfg(volumes={"summary": {"path": "data/v.npy", "format": "npy"}}), \
        "my.yaml: volumes.summary: the volume name is reserved: results/summary/ holds the summaries of every volume"


@case
def case_name_with_dot_dot(work):
    good(work)
    return cfg(volumes={"a..b": {"path": "data/v.npy", "format": "npy"}}), \
        "my.yaml: volumes.a..b: the volume name must not contain '..'"


@case
def case_name_300_characters(work):
    good(work)
    name = "a" * 300
    return cfg(volumes={name: {"path": "data/v.npy", "format": "npy"}}), \
        f"my.yaml: volumes.{name[:120]!r}: the volume name is 300 characters long, more than 100"


@case
def case_names_differing_only_in_case(work):
    good(work)
    return cfg(volumes={"A": {"path": "data/v.npy", "format": "npy"}, "a": {"path": "data/v.npy", "format": "npy"}}), \
        ("my.yaml: volumes.a and volumes.A differ only in case (their results folders would collide "
         "on a case-insensitive file system)")


# --- schema --------------------------------------------------------------------------------
@case
def case_a_nan(work):
    good(work)
    return sweep_on(sweep__a=float("nan")), "my.yaml: sweep.a = nan: not a finite number"


@case
def case_spacing_nan(work):
    good(work)
    return vol(path="data/v.npy", format="npy", spacing=[1.0, float("nan"), 1.0]), \
        "my.yaml: volumes.v.spacing[1] = nan: not a finite number"


@case
def case_xi_inf(work):
    good(work)
    return sweep_on(sweep__xi=[1.0, float("inf")]), "my.yaml: sweep.xi[1] = inf: not a finite number"


@case
def case_xi_repeated(work):
    good(work)
    return sweep_on(sweep__xi=[1, 1]), "my.yaml: sweep.xi = [1, 1]: [1, 1] has non-unique elements"


@case
def case_theta_unsorted(work):
    good(work)
    return sweep_on(sweep__theta={"values": [0.5, 0.1]}), \
        "my.yaml: sweep.theta.values = [0.5, 0.1]: must be strictly increasing (sorted, no repeated angle)"


@case
def case_phi_repeated(work):
    good(work)
    return sweep_on(sweep__phi={"values": [0.1, 0.1]}), \
        "my.yaml: sweep.phi.values = [0.1, 0.1]: must be strictly increasing (sorted, no repeated angle)"


@case
def case_stats_without_energy_and_report(work):
    good(work)
    return sweep_on(sweep__stats=["max"], report__enabled=True), (
        "my.yaml: sweep.stats = ['max']: must include energy while report.enabled is true (the energy "
        "maps and the dominant orientation are made from it); add energy or set report.enabled: false")


@case
def case_truncate_tiny(work):
    good(work)
    return sweep_on(sweep__truncate=1e-6), \
        "my.yaml: sweep.truncate = 1e-06: 1e-06 is less than the minimum of 3"


@case
def case_bins_two_billion(work):
    good(work)
    return cfg(thickness__bins=2_000_000_000), \
        "my.yaml: thickness.bins = 2000000000: 2000000000 is greater than the maximum of 100000"


@case
def case_theta_num_too_large(work):
    good(work)
    return sweep_on(sweep__theta={"num": 100000}), \
        "my.yaml: sweep.theta.num = 100000: 100000 is greater than the maximum of 65535"


@case
def case_threshold_unknown_method(work):
    good(work)
    return cfg(thickness__threshold="otsuu"), \
        "my.yaml: thickness.threshold = 'otsuu': 'otsuu' is not one of ['otsu', 'li', 'yen']"


# --- estimate ------------------------------------------------------------------------------
@case
def case_xi_far_below_a_voxel(work):
    good(work)
    return sweep_on(sweep__xi=[1e-9]), (
        "my.yaml: volumes.v: sweep.a = 1.0, sweep.xi = [1e-09], spacing: the kernel's narrow axis "
        "a·min(ξ, 1) is far below a voxel; its spectrum would sum 9.76e+27 aliased terms per frequency, "
        "more than limits.max_alias_terms = 1e+06")


@case
def case_a_huge(work):
    good(work)
    return sweep_on(sweep__a=1000), (
        "my.yaml: volumes.v: sweep.a = 1000, sweep.xi = [1.0], sweep.truncate = None: the kernel support "
        "(halo [7000, 7000, 7000] voxels) needs 40.9 TiB even for a 1-voxel tile, more than "
        "limits.max_job_memory_mb = 262144")


@case
def case_spacing_extreme(work):
    good(work)
    c = sweep_on()
    c["volumes"]["v"]["spacing"] = [1e-6, 1, 1e6]
    return c, ("my.yaml: volumes.v: sweep.a = 1.0, sweep.xi = [1.0], spacing: the kernel's narrow axis "
               "a·min(ξ, 1) is far below a voxel; its spectrum would sum 6.41e+06 aliased terms per "
               "frequency, more than limits.max_alias_terms = 1e+06")


@case
def case_too_many_jobs(work):
    good(work)
    return sweep_on(sweep__theta={"num": 60000}, sweep__block_size=4), (
        "my.yaml: sweep.theta = {'num': 60000} with sweep.block_size = 4: the run plans 15000 jobs, "
        "more than limits.max_jobs = 10000")


@case
def case_job_memory_ceiling(work):
    good(work)
    return sweep_on(sweep__a=30, limits={"max_job_memory_mb": 64}), (
        "my.yaml: volumes.v: sweep.a = 30, sweep.xi = [1.0], sweep.truncate = None: the kernel support "
        "(halo [210, 210, 210] voxels) needs 1.2 GiB even for a 1-voxel tile, more than "
        "limits.max_job_memory_mb = 64")


# --- inputs --------------------------------------------------------------------------------
@case
def case_fifo_input(work):
    os.mkfifo(work / "data" / "v.npy")
    return cfg(), f"volumes.v ({work}/data/v.npy): is a FIFO (named pipe); only regular files and folders are read"


@case
def case_link_to_a_device(work):
    os.symlink("/dev/zero", work / "data" / "v.npy")
    return cfg(), (f"my.yaml: volumes.v.path = 'data/v.npy' leaves the project directory {work}; "
                   "use an absolute path and allow_outside_paths: true")


@case
def case_link_inside_a_folder_leads_out(work):
    arr = zarr.create_array(str(work / "data" / "v.zarr"), shape=SHAPE, chunks=(9, 11, 7), dtype="f4")
    arr[...] = 1.0
    outside = work.parent / f"{work.name}-outside-chunk"
    chunk = work / "data" / "v.zarr" / "c" / "0" / "0" / "0"
    outside.write_bytes(chunk.read_bytes())
    chunk.unlink()
    os.symlink(outside, chunk)
    return vol(path="data/v.zarr", format="zarr"), (
        f"volumes.v ({work}/data/v.zarr): c/0/0/0 links to {outside}, outside the project directory {work}")


@case
def case_input_inside_results(work):
    (work / "results").mkdir()
    np.save(work / "results" / "v.npy", np.ones(SHAPE, np.float32))
    return vol(path="results/v.npy", format="npy"), (
        "my.yaml: volumes.v.path = 'results/v.npy' is inside results/, which the workflow writes; "
        "keep inputs elsewhere (e.g. data/)")


@case
def case_h5_external_link(work):
    with h5py.File(work / "data" / "other.h5", "w") as fh:
        fh["data"] = np.ones(SHAPE, np.float32)
    with h5py.File(work / "data" / "v.h5", "w") as fh:
        fh["data"] = h5py.ExternalLink("other.h5", "/data")
    return vol(path="data/v.h5", format="h5", dataset="data"), (
        f"volumes.v ({work}/data/v.h5): 'data' is an external link to other.h5:/data; external links "
        "are not followed")


@case
def case_h5_virtual_dataset(work):
    with h5py.File(work / "data" / "src.h5", "w") as fh:
        fh["x"] = np.ones(SHAPE, np.float32)
    layout = h5py.VirtualLayout(shape=SHAPE, dtype="f4")
    layout[...] = h5py.VirtualSource(str(work / "data" / "src.h5"), "x", shape=SHAPE)
    with h5py.File(work / "data" / "v.h5", "w") as fh:
        fh.create_virtual_dataset("data", layout)
    return vol(path="data/v.h5", format="h5", dataset="data"), (
        f"volumes.v ({work}/data/v.h5): 'data' is a virtual dataset (its voxels live in other files); "
        "copy it into a real dataset")


@case
def case_h5_unwritten_chunks(work):
    with h5py.File(work / "data" / "v.h5", "w") as fh:
        d = fh.create_dataset("data", shape=SHAPE, dtype="f4", chunks=(4, 4, 4))
        d[:4, :4, :4] = 1.0
    return vol(path="data/v.h5", format="h5", dataset="data"), (
        f"volumes.v ({work}/data/v.h5): 17 of 18 HDF5 chunk(s) of 'data' never written (HDF5 would "
        "read them as the fill value)")


@case
def case_zarr_v2_delta_bomb(work):
    arr = zarr.create_array(str(work / "data" / "v.zarr"), shape=SHAPE, chunks=(4, 4, 4), dtype="f4",
                            zarr_format=2, filters=[numcodecs.Delta("<f4")], compressors=numcodecs.Zstd(),
                            fill_value=0, config={"write_empty_chunks": True})
    arr[...] = 1.0
    bomb = numcodecs.Zstd(level=1).encode(np.zeros(64 << 20, np.uint8))
    (work / "data" / "v.zarr" / "0.0.0").write_bytes(bomb)
    return vol(path="data/v.zarr", format="zarr"), (
        f"volumes.v ({work}/data/v.zarr): corrupt Zarr chunk(s): 0.0.0 (declares {64 << 20} decoded "
        "bytes, the chunk has 256)")


@case
def case_zarr_gzip_unbounded(work):
    arr = zarr.create_array(str(work / "data" / "v.zarr"), shape=SHAPE, chunks=(4, 4, 4), dtype="f4",
                            compressors=zarr.codecs.GzipCodec())
    arr[...] = 1.0
    return vol(path="data/v.zarr", format="zarr"), (
        f"volumes.v ({work}/data/v.zarr): Zarr codec GzipCodec in the chain ['BytesCodec', 'GzipCodec'] "
        "has no known decoded size, so its chunks cannot be checked before decoding; recompress it with "
        "zstd or blosc (e.g. zarr.create_array(..., compressors=zarr.codecs.ZstdCodec())), whose headers "
        "declare the decoded size")


@case
def case_zarr_huge_and_empty(work):
    zarr.create_array(str(work / "data" / "v.zarr"), shape=(100000,) * 3, chunks=(64, 64, 64), dtype="u1")
    n = 1563**3
    return vol(path="data/v.zarr", format="zarr"), (
        f"volumes.v ({work}/data/v.zarr): {n} Zarr chunk(s) missing: c/0/0/0, c/0/0/1, c/0/0/2 and "
        f"{n - 3} more (Zarr would read them as the fill value; write inputs with write_empty_chunks=True)")


@case
def case_rgb_tiff(work):
    tifffile.imwrite(work / "data" / "v.tif", np.zeros((40, 30, 3), np.uint8), photometric="rgb")
    return vol(path="data/v.tif", format="tif"), (
        f"volumes.v ({work}/data/v.tif): is a colour or multi-channel image (axes YXS, shape (40, 30, 3)); "
        "volsweep reads one greyscale channel: save it as a single-channel stack")


@case
def case_npy_path_is_a_folder(work):
    (work / "data" / "v.npy").mkdir()
    return cfg(), f"volumes.v ({work}/data/v.npy): is a folder, expected a file"


@case
def case_nan_voxel_found_before_any_job(work):
    data = good(work)
    data[3, 4, 5] = np.nan
    np.save(work / "data" / "v.npy", data)
    return cfg(), f"volumes.v ({work}/data/v.npy): non-finite voxel nan at index (3, 4, 5)"


@case
def case_all_zero_volume(work):
    np.save(work / "data" / "v.npy", np.zeros(SHAPE, np.float32))
    return cfg(), (f"volumes.v ({work}/data/v.npy): every voxel is 0: a constant volume has no structure "
                   "to sweep or phase to measure")


@case
def case_threshold_selects_nothing(work):
    good(work)
    return cfg(thickness__enabled=True, thickness__threshold=5.0), (
        "my.yaml: thickness.threshold = 5.0: volumes.v: the selected phase (volume > 5) is empty; choose "
        "another thickness.threshold (e.g. otsu) or label")


@case
def case_threshold_beyond_dtype(work):
    np.save(work / "data" / "v.npy", np.random.default_rng(1).integers(0, 255, SHAPE).astype(np.uint8))
    return cfg(thickness__enabled=True, thickness__threshold=300), (
        "my.yaml: thickness.threshold = 300 selects nothing: uint8 values are at most 255 (volumes.v is "
        "uint8; ingest keeps the raw values; otsu picks a threshold from the histogram)")


# --- sheets ------------------------------------------------------------------------------
def sheet_cfg(work, text: bytes, name="volumes.tsv"):
    good(work)
    (work / name).write_bytes(text)
    return cfg(volumes={}, volume_sheet=name)


@case
def case_sheet_extra_field(work):
    return sheet_cfg(work, b"name\tpath\tformat\nv\tdata/v.npy\tnpy\textra\n"), \
        f"{work}/volumes.tsv:2: 4 fields, the header has 3 columns (extra: ['extra'])"


@case
def case_sheet_offset_not_an_integer(work):
    return sheet_cfg(work, b"name\tpath\tformat\toffset\nv\tdata/v.npy\tnpy\t1.5\n"), \
        f"{work}/volumes.tsv:2: offset = '1.5': not a whole number of bytes"


@case
def case_sheet_is_a_folder(work):
    good(work)
    (work / "volumes.tsv").mkdir()
    return cfg(volumes={}, volume_sheet="volumes.tsv"), \
        f"volume_sheet = '{work}/volumes.tsv': is a folder, not a TSV file"


@case
def case_sheet_is_a_fifo(work):
    good(work)
    os.mkfifo(work / "volumes.tsv")
    return cfg(volumes={}, volume_sheet="volumes.tsv"), \
        f"volume_sheet = '{work}/volumes.tsv': is not a regular file (a FIFO or a device); it is never opened"


@case
def case_sheet_name_300_characters(work):
    name = "b" * 300
    return sheet_cfg(work, f"name\tpath\tformat\n{name}\tdata/v.npy\tnpy\n".encode()), \
        f"{work}/volumes.tsv:2: name = {name[:120]!r}: the volume name is 300 characters long, more than 100"


@case
def case_sheet_nan_spacing(work):
    return sheet_cfg(work, b"name\tpath\tformat\tspacing\nv\tdata/v.npy\tnpy\tnan,1,1\n"), \
        f"{work}/volumes.tsv:2: spacing = 'nan,1,1': expected three finite numbers like 1,1,1"


def run_case(name, root):
    work = root / name
    (work / "data").mkdir(parents=True)
    config, expected = CASES[name](work)
    before = sorted(p.relative_to(work) for p in work.rglob("*"))
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        validate_config(config, "my.yaml", base_dir=work, announce=False)
    seconds = time.perf_counter() - t0
    after = sorted(p.relative_to(work) for p in work.rglob("*"))
    return err.value, expected, before, after, seconds


def test_at_least_30_cases():
    assert len(CASES) >= 30


@pytest.mark.parametrize("name", list(CASES))
def test_refused_with_one_line(tmp_path, name):
    err, expected, before, after, seconds = run_case(name, tmp_path)
    assert err.lines == [expected], "\n".join(err.lines)
    assert str(err) == expected and err.code == expected  # what SystemExit prints
    assert before == after, "validation wrote files"
    assert seconds < 20, f"validation took {seconds:.1f} s"


def test_every_mistake_at_once(tmp_path):
    (tmp_path / "data").mkdir()
    good(tmp_path)
    c = sweep_on(sweep__a=float("nan"), sweep__xi=[2, 2], colour="red",
                 volumes={"summary": {"path": "data/v.npy", "format": "npy"}})
    with pytest.raises(ConfigError) as err:
        validate_config(c, "my.yaml", base_dir=tmp_path)
    assert len(err.value.lines) == 4, err.value.lines
    assert any("unknown key colour" in ln for ln in err.value.lines)
    assert any("sweep.a = nan" in ln for ln in err.value.lines)
    assert any("sweep.xi = [2, 2]" in ln for ln in err.value.lines)
    assert any("volumes.summary" in ln for ln in err.value.lines)


def test_duplicate_yaml_keys_and_command_line_values_are_blamed_right(tmp_path):
    (tmp_path / "data").mkdir()
    good(tmp_path)
    path = tmp_path / "my.yaml"
    path.write_text("volumes: {v: {path: data/v.npy, format: npy}}\ndevice: cpu\n"
                    "thickness: {enabled: false, threshold: 0.5}\nsweep: {enabled: false}\n"
                    "report: {enabled: false}\ndevice: cpu\n")
    import yaml

    c = yaml.safe_load(path.read_text())
    c["ingest_buffer_mb"] = -1  # as --config ingest_buffer_mb=-1 would
    with pytest.raises(ConfigError) as err:
        validate_config(c, str(path), base_dir=tmp_path)
    assert err.value.lines == [
        f"{path}:6: key device appears twice (first on line 2); the second value would silently win",
        "--config: ingest_buffer_mb = -1: -1 is less than or equal to the minimum of 0"]


def test_bom_in_sheet_is_read(tmp_path):
    (tmp_path / "data").mkdir()
    good(tmp_path)
    (tmp_path / "v.tsv").write_bytes("\ufeffname\tpath\tformat\nv\tdata/v.npy\tnpy\n".encode())
    c = validate_config(cfg(volumes={}, volume_sheet="v.tsv"), "my.yaml", base_dir=tmp_path, announce=False)
    assert list(volume_entries(c, base_dir=tmp_path)) == ["v"]


def test_slices_are_read_in_natural_order(tmp_path):
    folder = tmp_path / "stack"
    folder.mkdir()
    for i in (1, 2, 10):
        tifffile.imwrite(folder / f"slice{i}.tif", np.full((3, 4), i, np.uint16))
    (folder / ".snakemake_timestamp").write_text("")
    v = open_volume({"path": str(folder), "format": "tif"})
    assert [int(v[k, 0, 0]) for k in range(3)] == [1, 2, 10]


def test_imagej_tiff_axes_and_spacing_come_from_metadata(tmp_path):
    data = np.arange(5 * 6 * 7, dtype=np.uint16).reshape(5, 6, 7)  # (z, y, x)
    tifffile.imwrite(tmp_path / "ij.tif", data, imagej=True, resolution=(1 / 0.65, 1 / 0.65),
                     metadata={"spacing": 2.0, "unit": "um", "axes": "ZYX"})
    entry = {"path": str(tmp_path / "ij.tif"), "format": "tif"}
    v = open_volume(entry)
    assert v.shape == (7, 6, 5) and v.axes == "zyx" and v.unit == "micrometer"
    np.testing.assert_allclose(v.spacing, [0.65, 0.65, 2.0], rtol=1e-3)
    np.testing.assert_array_equal(v[1:4, 2, 0:5], data[0:5, 2, 1:4].T)
    meta = source_metadata(entry)
    assert meta["axes_from_file"] == {"x": 2, "y": 1, "z": 0} and meta["spacing_from"] == "ImageJ TIFF"
    over = open_volume({**entry, "axes": "xyz", "spacing": [1, 1, 1]})
    assert over.shape == (5, 6, 7) and over.spacing == [1.0, 1.0, 1.0]


def test_ome_tiff_and_hdf5_metadata(tmp_path):
    data = np.zeros((5, 6, 7), np.uint16)
    tifffile.imwrite(tmp_path / "v.ome.tif", data, metadata={"axes": "ZYX", "PhysicalSizeX": 0.5,
                                                             "PhysicalSizeY": 0.25, "PhysicalSizeZ": 3.0})
    v = open_volume({"path": str(tmp_path / "v.ome.tif"), "format": "tif"})
    assert v.shape == (7, 6, 5) and v.spacing == [0.5, 0.25, 3.0] and v.unit == "micrometer"
    with h5py.File(tmp_path / "v.h5", "w") as fh:
        fh["d"] = data
        fh["d"].attrs["element_size_um"] = [3.0, 0.25, 0.5]
    v = open_volume({"path": str(tmp_path / "v.h5"), "format": "h5", "dataset": "d"})
    assert v.shape == (7, 6, 5) and v.spacing == [0.5, 0.25, 3.0] and v.axes == "zyx"


def test_ome_zarr_metadata(tmp_path):
    from volsweep.io.store import create_store

    arr = create_store(tmp_path / "img.zarr", (4, 5, 6), chunks=(4, 5, 6), shards=(4, 5, 6),
                       spacing=(0.5, 1.0, 2.0), unit="micrometer", fill_value=0)
    arr[...] = 1.0
    v = open_volume({"path": str(tmp_path / "img.zarr"), "format": "zarr", "dataset": "0"})
    assert v.spacing == [0.5, 1.0, 2.0] and v.unit == "micrometer" and v.axes == "xyz"


def test_otsu_config_is_accepted_and_resolved(tmp_path):
    from volsweep.phase import check_phase

    (tmp_path / "data").mkdir()
    data = np.zeros(SHAPE, np.uint16)
    data[2:6] = 3000
    np.save(tmp_path / "data" / "v.npy", data)
    c = validate_config(cfg(thickness__enabled=True, thickness__threshold="otsu"), "my.yaml",
                        base_dir=tmp_path, announce=False)
    entry = volume_entries(c, base_dir=tmp_path)["v"]
    rule = check_phase(open_volume(entry), "v", threshold="otsu")
    assert 0 < rule["threshold"] < 3000
    assert rule["phase_fraction"] == pytest.approx(4 / 9)


def test_every_case_through_the_cli(tmp_path):
    """The same cases as the Snakemake command line sees them: a non-zero exit, the one line
    on stderr, nothing written but Snakemake's own .snakemake/ folder."""
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    import yaml

    repo = Path(__file__).resolve().parents[1]

    def cli(name):
        work = tmp_path / name
        (work / "data").mkdir(parents=True)
        config, expected = CASES[name](work)
        (work / "my.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        before = sorted(p.relative_to(work) for p in work.rglob("*"))
        out = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(repo / "Snakefile"), "-n",
                              "--cores", "1", "--configfile", "my.yaml"], cwd=work,
                             capture_output=True, text=True, timeout=300)
        after = sorted(p.relative_to(work) for p in work.rglob("*")
                       if p.relative_to(work).parts[0] != ".snakemake")
        return name, out, expected, before, after

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(cli, CASES))
    problems = []
    for name, out, expected, before, after in results:
        lines = out.stderr.splitlines()
        work = tmp_path / name
        expected = str(work / "my.yaml") + expected[len("my.yaml"):] if expected.startswith("my.yaml") else expected
        if out.returncode == 0 or lines != [expected] or before != after:
            problems.append(f"{name}: exit {out.returncode}, stderr {lines[-3:]!r}, "
                            f"expected {expected!r}, written {sorted(set(after) - set(before))}")
    assert not problems, "\n".join(problems)
