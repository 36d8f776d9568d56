"""Bad inputs through the Snakemake CLI: each run stops with one line naming the problem.

Every case is a new user's run on a tiny volume (9 x 11 x 7): a config file and
data files in a fresh directory, then ``snakemake --cores 1``.  The run must exit
non-zero, print exactly the expected line and no traceback, write nothing
outside ``results/``, ``logs/`` and ``.snakemake/`` (and nothing outside its
folder), and leave nothing under ``results/``.  Errors a header or the
validation scan of a small input shows (NaN voxels, a corrupt compressed chunk)
stop the run before any job starts (no ``logs/`` either).  tests/test_hostile.py
holds many more cases through validate_config itself.

The runs are independent, so they are started together (a few at a time) by a
module fixture and each case's test then checks its own run.
"""

import copy
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h5py
import numpy as np
import pytest
import tifffile
import yaml
import zarr

REPO = Path(__file__).resolve().parents[1]
SHAPE = (9, 11, 7)
BUDGET_MB = 1
MB = 2**20
PARALLEL_RUNS = 4
TIMEOUT_S = 300
VOLUME_ERROR = "volsweep.io.readers.VolumeError: "

BASE = {
    "volumes": {"v": {"path": "data/v.npy", "format": "npy"}},
    "device": "cpu",
    "ingest_buffer_mb": BUDGET_MB,
    "storage": {"chunks": [4, 4, 4], "shards": [8, 8, 8]},
    "sweep": {"enabled": False, "theta": {"num": 2}, "phi": {"num": 1}, "xi": [1.0]},
    "thickness": {"enabled": False, "threshold": 0.5, "chunk": [8, 8, 8]},
    "report": {"enabled": False},
}


def good_volume():
    return np.random.default_rng(7).random(SHAPE).astype(np.float32)


class Case:
    """One bad run: ``build(work)`` writes the inputs and returns (config, expected line, stage)."""

    cases = {}

    def __init__(self, stage="parse"):
        self.stage = stage

    def __call__(self, build):
        Case.cases[build.__name__.removeprefix("case_")] = (build, self.stage)
        return build


def config(**patch):
    """The base config with top-level keys (or dotted ``a__b`` keys) replaced."""
    cfg = copy.deepcopy(BASE)
    for key, value in patch.items():
        node, parts = cfg, key.split("__")
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = value
    return cfg


def volume(**entry):
    return config(volumes={"v": entry})


def save_good(work):
    np.save(work / "data" / "v.npy", good_volume())


# --- config -----------------------------------------------------------------------------

@Case()
def case_unknown_key(work):
    save_good(work)
    return config(colour="red"), "{cfg}: unknown key colour (allowed: {allowed})"


@Case()
def case_unknown_nested_key(work):
    save_good(work)
    cfg = config()
    cfg["sweep"]["colour"] = "red"
    return cfg, "{cfg}: unknown key sweep.colour (allowed: {sweep_allowed})"


@Case()
def case_wrong_type(work):
    save_good(work)
    return config(sweep__a="big"), "{cfg}: sweep.a = 'big': 'big' is not one of ['auto']"


@Case()
def case_xi_zero(work):
    save_good(work)
    return (config(sweep__xi=[1.0, 0.0]),
            "{cfg}: sweep.xi[1] = 0.0: 0.0 is less than or equal to the minimum of 0")


@Case()
def case_xi_negative(work):
    save_good(work)
    return (config(sweep__xi=[-2.0]),
            "{cfg}: sweep.xi[0] = -2.0: -2.0 is less than or equal to the minimum of 0")


@Case()
def case_a_zero(work):
    save_good(work)
    return config(sweep__a=0), "{cfg}: sweep.a = 0: 0 is less than or equal to the minimum of 0"


@Case()
def case_a_negative(work):
    save_good(work)
    return (config(sweep__a=-1.5),
            "{cfg}: sweep.a = -1.5: -1.5 is less than or equal to the minimum of 0")


@Case()
def case_empty_xi_grid(work):
    save_good(work)
    return config(sweep__xi=[]), "{cfg}: sweep.xi = []: [] should be non-empty"


@Case()
def case_empty_theta_grid(work):
    save_good(work)
    return (config(sweep__theta={"values": []}),
            "{cfg}: sweep.theta.values = []: [] should be non-empty")


@Case()
def case_zero_phi_grid(work):
    save_good(work)
    return (config(sweep__phi={"num": 0}),
            "{cfg}: sweep.phi.num = 0: 0 is less than the minimum of 1")


@Case()
def case_negative_spacing(work):
    save_good(work)
    return (volume(path="data/v.npy", format="npy", spacing=[1.0, -1.0, 1.0]),
            "{cfg}: volumes.v.spacing[1] = -1.0: -1.0 is less than or equal to the minimum of 0")


@Case()
def case_chunks_do_not_divide_shards(work):
    save_good(work)
    return (config(storage={"chunks": [3, 4, 4], "shards": [8, 8, 8]}),
            "{cfg}: storage.chunks = [3, 4, 4] must divide storage.shards = [8, 8, 8]")


@Case()
def case_thickness_chunk_not_shard_multiple(work):
    save_good(work)
    cfg = config(thickness__chunk=[12, 8, 8])
    cfg["thickness"]["enabled"] = True
    return cfg, ("{cfg}: thickness.chunk = [12, 8, 8] must be a multiple of storage.shards = "
                 "[8, 8, 8] (concurrent writers must not share a shard)")


@Case()
def case_path_leaves_project(work):
    np.save(work.parent / f"{work.name}-outside.npy", good_volume())
    path = f"../{work.name}-outside.npy"
    return (volume(path=path, format="npy"),
            f"{{cfg}}: volumes.v.path = {path!r} leaves the project directory {work}; "
            "use an absolute path and allow_outside_paths: true")


@Case()
def case_absolute_path_not_allowed(work):
    outside = work.parent / f"{work.name}-outside.npy"
    np.save(outside, good_volume())
    return (volume(path=str(outside), format="npy"),
            f"{{cfg}}: volumes.v.path = {str(outside)!r} leaves the project directory {work}; "
            "use an absolute path and allow_outside_paths: true")


@Case()
def case_unknown_format(work):
    save_good(work)
    return (volume(path="data/v.npy", format="png"),
            "{cfg}: volumes.v.format = 'png': 'png' is not one of "
            "['npy', 'tif', 'tiff', 'zarr', 'h5', 'raw']")


@Case()
def case_raw_without_shape(work):
    good_volume().tofile(work / "data" / "v.raw")
    return (volume(path="data/v.raw", format="raw", dtype="<f4"),
            "{cfg}: volumes.v: format raw needs shape and dtype")


# --- inputs: found from headers, before any job ----------------------------------------

@Case()
def case_missing_file(work):
    return volume(path="data/none.npy", format="npy"), \
        "{cfg}: volumes.v.path = 'data/none.npy': file not found"


@Case()
def case_not_3d(work):
    np.save(work / "data" / "v.npy", np.zeros(SHAPE[:2], np.float32))
    return config(), "volumes.v ({data}/v.npy): shape (9, 11) is not 3D"


@Case()
def case_complex_dtype(work):
    np.save(work / "data" / "v.npy", np.zeros(SHAPE, np.complex64))
    return config(), ("volumes.v ({data}/v.npy): dtype complex64 is not a real number type "
                      "(bool, int, uint, float)")


@Case()
def case_string_dtype(work):
    np.save(work / "data" / "v.npy", np.full(SHAPE, "abc"))
    return config(), ("volumes.v ({data}/v.npy): dtype <U3 is not a real number type "
                      "(bool, int, uint, float)")


@Case()
def case_empty_volume(work):
    np.save(work / "data" / "v.npy", np.zeros((9, 0, 7), np.float32))
    return config(), "volumes.v ({data}/v.npy): shape (9, 0, 7) is empty"


@Case()
def case_npy_header_declares_huge_shape(work):
    huge = (100_000, 100_000, 100_000)
    with open(work / "data" / "v.npy", "wb") as fh:
        np.lib.format.write_array_header_1_0(
            fh, {"descr": "<f4", "fortran_order": False, "shape": huge})
        fh.write(bytes(64))
    need = 4 * 100_000**3
    return config(), (f"volumes.v ({{data}}/v.npy): header declares shape {huge} of float32 = "
                      f"{need} bytes, the file holds 64")


@Case()
def case_pickled_npy(work):
    arr = np.empty(SHAPE, dtype=object)
    arr[...] = None
    np.save(work / "data" / "v.npy", arr, allow_pickle=True)
    return config(), ("volumes.v ({data}/v.npy): cannot open as npy: dtype object holds Python "
                      "objects (a pickled .npy); pickles are never loaded")


@Case()
def case_raw_shorter_than_shape(work):
    good_volume()[:4].tofile(work / "data" / "v.raw")
    return (volume(path="data/v.raw", format="raw", shape=list(SHAPE), dtype="<f4"),
            "volumes.v ({data}/v.raw): offset + shape (9, 11, 7) of <f4 = 2772 bytes, "
            "the file holds 1232")


@Case()
def case_truncated_tiff(work):
    path = work / "data" / "v.tif"
    tifffile.imwrite(path, good_volume())
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)
    with tifffile.TiffFile(path) as tif:
        end = tif.series[0].dataoffset + good_volume().nbytes
    return (volume(path="data/v.tif", format="tif"),
            f"volumes.v ({{data}}/v.tif): truncated: series (9, 11, 7) ends at byte {end}, "
            f"the file has {size // 2}")


@Case()
def case_tiff_huge_tiles(work):
    path = work / "data" / "v.tif"
    tifffile.imwrite(path, np.zeros((2, 32, 32), np.float32), tile=(16, 16))
    huge = 1 << 16
    with tifffile.TiffFile(path, mode="r+b") as tif:
        for page in tif.pages:
            page.tags["TileWidth"].overwrite(huge)
            page.tags["TileLength"].overwrite(huge)
    return (volume(path="data/v.tif", format="tif"),
            f"volumes.v ({{data}}/v.tif): tile of page 0, shape ({huge}, {huge}) decodes to "
            f"{4 * huge * huge} bytes, more than the memory budget of {BUDGET_MB * MB} bytes")


@Case()
def case_tiff_folder_without_tiffs(work):
    (work / "data" / "stack").mkdir()
    (work / "data" / "stack" / "notes.txt").write_text("no slices here\n")
    return (volume(path="data/stack", format="tif"),
            "{data}/stack: folder holds no .tif/.tiff files")


@Case()
def case_h5_without_the_dataset(work):
    with h5py.File(work / "data" / "v.h5", "w") as fh:
        fh["other"] = good_volume()
    return (volume(path="data/v.h5", format="h5", dataset="data"),
            "volumes.v ({data}/v.h5): dataset 'data' not found (has: other)")


@Case()
def case_h5_dataset_is_a_group(work):
    with h5py.File(work / "data" / "v.h5", "w") as fh:
        fh.create_group("data")["x"] = good_volume()
    return (volume(path="data/v.h5", format="h5", dataset="data"),
            "volumes.v ({data}/v.h5): 'data' is an HDF5 group, not a dataset")


def write_zarr(path, data=None, **kwargs):
    arr = zarr.create_array(str(path), shape=SHAPE, dtype="float32", fill_value=0,
                            chunks=kwargs.pop("chunks", (4, 4, 4)), **kwargs)
    arr[...] = good_volume() if data is None else data
    return arr


@Case()
def case_zarr_group_without_dataset(work):
    group = zarr.create_group(str(work / "data" / "v.zarr"))
    group.create_array("0", shape=SHAPE, dtype="float32", chunks=(4, 4, 4))[...] = good_volume()
    return (volume(path="data/v.zarr", format="zarr"),
            "volumes.v ({data}/v.zarr): is a Zarr group; give dataset: the array's path inside it")


@Case()
def case_zarr_missing_chunk(work):
    write_zarr(work / "data" / "v.zarr")
    (work / "data" / "v.zarr" / "c" / "1" / "0" / "1").unlink()
    return (volume(path="data/v.zarr", format="zarr"),
            "volumes.v ({data}/v.zarr): 1 Zarr chunk(s) missing: c/1/0/1 (Zarr would read them "
            "as the fill value; write inputs with write_empty_chunks=True)")


@Case()
def case_zarr_missing_chunk_inside_a_shard(work):
    data = good_volume()
    data[4:8, 0:4, 0:4] = 0  # the fill value: Zarr's default does not store this chunk
    write_zarr(work / "data" / "v.zarr", data, shards=(8, 8, 8))
    return (volume(path="data/v.zarr", format="zarr"),
            "volumes.v ({data}/v.zarr): 1 Zarr chunk(s) missing: c/0/0/0[1,0,0] (Zarr would read "
            "them as the fill value; write inputs with write_empty_chunks=True)")


@Case()
def case_zarr_corrupt_chunk_header(work):
    write_zarr(work / "data" / "v.zarr")
    (work / "data" / "v.zarr" / "c" / "0" / "1" / "0").write_bytes(b"not a compressed chunk")
    return (volume(path="data/v.zarr", format="zarr"),
            "volumes.v ({data}/v.zarr): corrupt Zarr chunk(s): c/0/1/0 (not a zstd frame)")


@Case()
def case_zarr_decompression_bomb(work):
    import numcodecs

    write_zarr(work / "data" / "v.zarr")
    bomb = numcodecs.Zstd(level=19).encode(np.zeros(64 * MB, np.uint8))
    (work / "data" / "v.zarr" / "c" / "0" / "0" / "0").write_bytes(bomb)
    return (volume(path="data/v.zarr", format="zarr"),
            f"volumes.v ({{data}}/v.zarr): corrupt Zarr chunk(s): c/0/0/0 (declares {64 * MB} "
            f"decoded bytes, the chunk has {4 * 4**3})")


@Case()
def case_zarr_chunk_larger_than_budget(work):
    big = (128, 128, 128)
    zarr.create_array(str(work / "data" / "v.zarr"), shape=SHAPE, dtype="float32", chunks=big)
    return (volume(path="data/v.zarr", format="zarr"),
            f"volumes.v ({{data}}/v.zarr): Zarr chunk {big} decodes to {4 * 128**3} bytes, more "
            f"than the memory budget of {BUDGET_MB * MB} bytes")


# --- inputs: found while reading the voxels, in the ingest job --------------------------

@Case()
def case_nan_voxel(work):
    data = good_volume()
    data[3, 4, 5] = np.nan
    np.save(work / "data" / "v.npy", data)
    return config(), "volumes.v ({data}/v.npy): non-finite voxel nan at index (3, 4, 5)"


@Case()
def case_inf_voxel(work):
    data = good_volume()
    data[8, 10, 6] = -np.inf
    np.save(work / "data" / "v.npy", data)
    return config(), "volumes.v ({data}/v.npy): non-finite voxel -inf at index (8, 10, 6)"


@Case()
def case_zarr_corrupt_chunk_body(work):
    write_zarr(work / "data" / "v.zarr")
    chunk = work / "data" / "v.zarr" / "c" / "1" / "1" / "0"
    blob = chunk.read_bytes()
    head = 8  # keep the zstd frame header (its declared size is right), garble the rest
    chunk.write_bytes(blob[:head] + bytes(b ^ 0xFF for b in blob[head:]))
    return (volume(path="data/v.zarr", format="zarr"),
            "volumes.v ({data}/v.zarr): cannot read the voxels: RuntimeError: Zstd decompression error: "
            "invalid input data")


# --- hostile inputs: a representative case of each category ---------------------------

@Case()
def case_reserved_volume_name(work):
    save_good(work)
    return (config(volumes={"summary": {"path": "data/v.npy", "format": "npy"}}),
            "{cfg}: volumes.summary: the volume name is reserved: results/summary/ holds the summaries "
            "of every volume")


@Case()
def case_volume_name_with_slash(work):
    save_good(work)
    return (config(volumes={"../x": {"path": "data/v.npy", "format": "npy"}}),
            "{cfg}: volumes.'../x': the volume name may hold only letters, digits, '_', '.' and '-', "
            "starting with a letter or digit (no path separators, wildcards, braces or spaces)")


@Case()
def case_nan_scale(work):
    save_good(work)
    return config(sweep__a=float("nan")), "{cfg}: sweep.a = nan: not a finite number"


@Case()
def case_repeated_xi(work):
    save_good(work)
    return config(sweep__xi=[1.0, 1.0]), "{cfg}: sweep.xi = [1.0, 1.0]: [1.0, 1.0] has non-unique elements"


@Case()
def case_unsorted_theta(work):
    save_good(work)
    return (config(sweep__theta={"values": [0.5, 0.1]}),
            "{cfg}: sweep.theta.values = [0.5, 0.1]: must be strictly increasing (sorted, no repeated angle)")


@Case()
def case_kernel_far_below_a_voxel(work):
    save_good(work)
    cfg = config(sweep__xi=[1e-9])
    cfg["sweep"]["enabled"] = True
    return cfg, ("{cfg}: volumes.v: sweep.a = 1.0, sweep.xi = [1e-09], spacing: the kernel's narrow axis "
                 "a·min(ξ, 1) is far below a voxel; its spectrum would sum 9.76e+27 aliased terms per "
                 "frequency, more than limits.max_alias_terms = 1e+06")


@Case()
def case_fifo_input(work):
    os.mkfifo(work / "data" / "v.npy")
    return config(), "volumes.v ({data}/v.npy): is a FIFO (named pipe); only regular files and folders are read"


@Case()
def case_zarr_v2_filter_bomb(work):
    import numcodecs

    arr = zarr.create_array(str(work / "data" / "v.zarr"), shape=SHAPE, chunks=(4, 4, 4), dtype="f4",
                            zarr_format=2, filters=[numcodecs.Delta("<f4")], compressors=numcodecs.Zstd(),
                            fill_value=0, config={"write_empty_chunks": True})
    arr[...] = good_volume()
    (work / "data" / "v.zarr" / "0.0.0").write_bytes(numcodecs.Zstd(level=1).encode(np.zeros(64 * MB, np.uint8)))
    return (volume(path="data/v.zarr", format="zarr"),
            f"volumes.v ({{data}}/v.zarr): corrupt Zarr chunk(s): 0.0.0 (declares {64 * MB} decoded bytes, "
            "the chunk has 256)")


@Case()
def case_sheet_row_with_extra_field(work):
    save_good(work)
    (work / "volumes.tsv").write_text("name\tpath\tformat\nv\tdata/v.npy\tnpy\textra\n")
    return (config(volumes={}, volume_sheet="volumes.tsv"),
            "{work}/volumes.tsv:2: 4 fields, the header has 3 columns (extra: ['extra'])")


@Case()
def case_all_zero_volume(work):
    np.save(work / "data" / "v.npy", np.zeros(SHAPE, np.float32))
    return config(), ("volumes.v ({data}/v.npy): every voxel is 0: a constant volume has no structure "
                      "to sweep or phase to measure")


@Case()
def case_duplicate_yaml_key(work):
    save_good(work)
    return "duplicate", "{cfg}:33: key device appears twice (first on line 5); the second value would silently win"


@Case()
def case_command_line_value(work):
    save_good(work)
    return ("--config", "ingest_buffer_mb=-1"), \
        "--config: ingest_buffer_mb = -1: -1 is less than or equal to the minimum of 0"


def run_case(name, root):
    build, stage = Case.cases[name]
    work = root / name
    (work / "data").mkdir(parents=True)
    cfg, expected = build(work)
    cfg_path = work / "cfg.yaml"
    extra = []
    if cfg == "duplicate":  # the base config with a key given twice
        cfg_path.write_text(yaml.safe_dump(config(), sort_keys=False) + "device: cuda\n")
    elif isinstance(cfg, tuple):  # a good file and a bad --config value
        cfg_path.write_text(yaml.safe_dump(config(), sort_keys=False))
        extra = list(cfg)
    else:
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    before = set(files_under(work))
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    expected = expected.format(cfg=cfg_path, data=work / "data", work=work,
                               allowed=", ".join(sorted(schema["properties"])),
                               sweep_allowed=", ".join(sorted(schema["properties"]["sweep"]["properties"])))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(work),
           "--configfile", str(cfg_path), "--cores", "1", *extra]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    written = sorted(f for f in set(files_under(work)) - before
                     if not f.startswith(("results/", "logs/", ".snakemake/")))
    return work, stage, expected, out, written


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    with ThreadPoolExecutor(PARALLEL_RUNS) as pool:
        futures = {name: pool.submit(run_case, name, root) for name in Case.cases}
        results = {name: f.result() for name, f in futures.items()}
    # Nothing escaped the case folders: the root holds them and the "outside" inputs only.
    strays = [p.name for p in root.iterdir() if p.name not in Case.cases and "-outside" not in p.name]
    assert strays == [], strays
    return results


def files_under(path: Path):
    if not path.exists():
        return []
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() or p.is_fifo())


def test_there_are_at_least_50_cases():
    assert len(Case.cases) >= 50


@pytest.mark.parametrize("name", list(Case.cases))
def test_bad_input_stops_with_one_line(runs, name):
    work, stage, expected, out, written = runs[name]
    assert out.returncode != 0, out.stderr[-3000:]
    lines = out.stderr.splitlines()
    assert written == [], f"written outside results/ and logs/: {written}"
    if stage == "parse":
        assert lines == [expected], out.stderr[-3000:]  # the one line, no traceback
        assert not (work / "logs").exists(), "a job ran"
    else:
        matches = [ln for ln in lines if ln.startswith(VOLUME_ERROR + expected)]
        assert len(matches) == 1, out.stderr[-3000:]
        log = (work / "logs" / "v" / "ingest.log").read_text().splitlines()
        assert matches[0] in log
    assert files_under(work / "results") == []
