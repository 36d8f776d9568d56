# Shared definitions and input functions: volumes, parameter blocks, thickness chunks.
import re

from volsweep.backend import cuda_available
from volsweep.config import angle_values, sweep_blocks, volume_entries
from volsweep.io.readers import source_shape
from volsweep.pipeline import provenance
from volsweep.tiling import plan_tiles

CONFIGFILE = ", ".join(map(str, workflow.overwrite_configfiles or ["config.yaml"]))
VOLUMES = volume_entries(config, base_dir=".", configfile=CONFIGFILE)
SHAPES = {name: source_shape(entry, name) for name, entry in VOLUMES.items()}
SWEEP = config["sweep"]
THICKNESS = config["thickness"]
THETA = angle_values(SWEEP["theta"])
PHI = angle_values(SWEEP["phi"])
BLOCKS = sweep_blocks(config)
PROVENANCE = provenance(config)
ENV = "../../envs/volsweep.yaml"
ORIENTATION = SWEEP["enabled"] and SWEEP["orientation_map"]
ORIENTATION_BLOCK_OUTPUT = (
    {"orientation": temp(directory("results/{vol}/sweep/{block}.orientation.zarr"))}
    if ORIENTATION
    else {}
)
REPORT = config["report"]
USES_GPU = int(config["device"] == "cuda" or (config["device"] == "auto" and cuda_available()))
MB = 2**20
RETRIES = 2  # compute rules: a transient failure (node, OOM) is retried with mem_mb x attempt; not
# ingest, whose failures are bad input (retrying would only repeat the error)


wildcard_constraints:
    vol="|".join(re.escape(v) for v in VOLUMES),
    block=r"\d+",
    chunk=r"\d+",


def volume_nbytes(vol):
    """Bytes of one float32 copy of the volume."""
    shape = SHAPES[vol]
    return 4 * shape[0] * shape[1] * shape[2]


def n_chunks(vol):
    return len(plan_tiles(SHAPES[vol], THICKNESS["chunk"]))


def source_files(wildcards):
    entry = VOLUMES[wildcards.vol]
    return [] if "synthetic" in entry else [entry["path"]]


def sweep_block_files(wildcards):
    return expand("results/{vol}/sweep/{block}.nc", vol=wildcards.vol, block=range(len(BLOCKS)))


def thickness_chunk_files(wildcards):
    return expand("results/{vol}/thickness/chunks/{chunk}.npz", vol=wildcards.vol,
                  chunk=range(n_chunks(wildcards.vol)))


def orientation_block_files(wildcards):
    return expand("results/{vol}/sweep/{block}.orientation.zarr", vol=wildcards.vol,
                  block=range(len(BLOCKS)))


def figures(vol):
    """The report's PNGs of one volume."""
    if not REPORT["enabled"]:
        return []
    out = []
    if SWEEP["enabled"]:
        out.append(f"results/{vol}/plots/energy_maps.png")
    if ORIENTATION:
        out.append(f"results/{vol}/plots/orientation_slice.png")
    if THICKNESS["enabled"]:
        out += [f"results/{vol}/plots/thickness_histogram.png",
                f"results/{vol}/plots/thickness_slice.png"]
    return out


def all_outputs():
    outputs = []
    for vol in VOLUMES:
        outputs.append(f"results/{vol}/volume.zarr")
        if SWEEP["enabled"]:
            outputs.append(f"results/{vol}/sweep.nc")
        if ORIENTATION:
            outputs.append(f"results/{vol}/orientation.zarr")
        if THICKNESS["enabled"]:
            outputs += [f"results/{vol}/thickness.nc", f"results/{vol}/thickness.zarr"]
        outputs += figures(vol)
    if SWEEP["enabled"]:
        outputs.append("results/summary/sweep.nc")
    if THICKNESS["enabled"]:
        outputs.append("results/summary/thickness.nc")
    return outputs
