# Shared definitions and input functions: volumes, job plans, stores.
import re

from volsweep.config import angle_values, volume_entries
from volsweep.devices import gpu_planned
from volsweep.io.complete import unreadable_intermediates
from volsweep.io.readers import source_shape
from volsweep import jobs
from volsweep.provenance import provenance
from volsweep.thickness import thickness_memory_bytes
from volsweep.tiling import plan_tiles

CONFIGFILE = CONFIGFILES
VOLUMES = volume_entries(config, base_dir=".", configfile=CONFIGFILE)
SHAPES = {name: source_shape(entry, name) for name, entry in VOLUMES.items()}
SWEEP = config["sweep"]
THICKNESS = config["thickness"]
THETA = angle_values(SWEEP["theta"])
PHI = angle_values(SWEEP["phi"])
PROVENANCE = provenance(config)
ENV = "../../envs/volsweep.yaml"
ORIENTATION = SWEEP["enabled"] and SWEEP["orientation_map"]
REPORT = config["report"]
PHASE_RULE = (
    {k: THICKNESS[k] for k in ("threshold", "label", "invert")}
    if THICKNESS["enabled"]
    else None
)
USES_GPU = int(gpu_planned(config["device"]))
SWEEP_THREADS = 2
MB = 2**20
RETRIES = 2  # compute rules: a transient failure (node, OOM) is retried with mem_mb x attempt; not
# ingest, whose failures are bad input (retrying would only repeat the error)


def store(path):
    """A Zarr store as a rule's file: its root metadata (no marker inside the store)."""
    return f"{path}/zarr.json"


def sweep_seconds(vol):
    """The engine's estimate of a volume's whole sweep (jobs.sweep_seconds)."""
    return jobs.sweep_seconds(
        SHAPES[vol],
        VOLUMES[vol]["spacing"],
        config,
        gpu=bool(USES_GPU),
        threads=SWEEP_THREADS,
    )


def sweep_blocks(vol):
    return jobs.sweep_plan(
        SHAPES[vol],
        VOLUMES[vol]["spacing"],
        config,
        gpu=bool(USES_GPU),
        threads=SWEEP_THREADS,
        seconds=SWEEP_SECONDS[vol],
    )


def sweep_threads(wildcards):
    """Cores of a sweep job: one for a short CPU sweep (jobs.sweep_threads)."""
    return jobs.sweep_threads(
        SWEEP_SECONDS[wildcards.vol], gpu=bool(USES_GPU), threads=SWEEP_THREADS
    )


def thickness_chunk(vol):
    return jobs.thickness_plan(SHAPES[vol], VOLUMES[vol]["spacing"], config)


# A truncated or corrupt intermediate (a killed copy, a full disk) is removed here, so
# its job runs again before anything downstream reads it.
for path in unreadable_intermediates(f"results/{vol}" for vol in VOLUMES):
    logger.warning(
        f"volsweep: {path} is unreadable (truncated or corrupt); it will be remade"
    )
    path.unlink()


SWEEP_SECONDS = {vol: sweep_seconds(vol) for vol in VOLUMES} if SWEEP["enabled"] else {}
SWEEP_BLOCKS = {vol: sweep_blocks(vol) for vol in SWEEP_SECONDS}
THICKNESS_CHUNK = (
    {vol: thickness_chunk(vol) for vol in VOLUMES} if THICKNESS["enabled"] else {}
)


def names_regex(names):
    """A wildcard constraint matching exactly these volume names (nothing when empty)."""
    return "|".join(re.escape(v) for v in names) or "(?!)"


SWEEP_WHOLE = names_regex(v for v, b in SWEEP_BLOCKS.items() if len(b) == 1)
SWEEP_SPLIT = names_regex(v for v, b in SWEEP_BLOCKS.items() if len(b) > 1)
THICKNESS_WHOLE = names_regex(v for v, c in THICKNESS_CHUNK.items() if c is None)
THICKNESS_SPLIT = names_regex(v for v, c in THICKNESS_CHUNK.items() if c is not None)


wildcard_constraints:
    vol=names_regex(VOLUMES),
    block=r"\d+",
    chunk=r"\d+",


def volume_nbytes(vol):
    """Bytes of one float32 copy of the volume."""
    shape = SHAPES[vol]
    return 4 * shape[0] * shape[1] * shape[2]


def sweep_inputs(wildcards):
    """The volume, and its thickness distribution when ``sweep.a`` is ``auto``."""
    inputs = {"volume": store(f"results/{wildcards.vol}/volume.zarr")}
    if SWEEP["a"] == "auto":
        inputs["thickness"] = f"results/{wildcards.vol}/thickness.nc"
    return inputs


def block_theta(wildcards):
    return THETA[SWEEP_BLOCKS[wildcards.vol][int(wildcards.block)]].tolist()


def block_theta_offset(wildcards):
    return int(SWEEP_BLOCKS[wildcards.vol][int(wildcards.block)][0])


def source_files(wildcards):
    entry = VOLUMES[wildcards.vol]
    return [] if "synthetic" in entry else [entry["path"]]


def sweep_block_files(wildcards):
    return expand(
        "results/{vol}/sweep/{block}.nc",
        vol=wildcards.vol,
        block=range(len(SWEEP_BLOCKS[wildcards.vol])),
    )


def orientation_block_files(wildcards):
    return expand(
        "results/{vol}/sweep/{block}.orientation.zarr",
        vol=wildcards.vol,
        block=range(len(SWEEP_BLOCKS[wildcards.vol])),
    )


def chunk_grid(vol):
    """(i, j, k) shard index of every thickness chunk: chunks are the store's shards."""
    chunk = THICKNESS_CHUNK[vol]
    return [
        tuple(s.start // c for s, c in zip(t.core, chunk))
        for t in plan_tiles(SHAPES[vol], chunk)
    ]


def thickness_chunk_files(wildcards):
    return [
        f"results/{wildcards.vol}/thickness/chunks/{i}_{j}_{k}.npz"
        for i, j, k in chunk_grid(wildcards.vol)
    ]


def thickness_shard_files(wildcards):
    return [
        f"results/{wildcards.vol}/thickness.zarr/0/c/{i}/{j}/{k}"
        for i, j, k in chunk_grid(wildcards.vol)
    ]


def sweep_mem_mb(wildcards, attempt):
    return attempt * int(8 * volume_nbytes(wildcards.vol) / MB + 512)


def thickness_mem_mb(wildcards, attempt):
    return attempt * int(thickness_memory_bytes(SHAPES[wildcards.vol]) / MB + 512)


def figures(vol):
    """The report's PNGs of one volume."""
    if not REPORT["enabled"]:
        return []
    out = []
    if SWEEP["enabled"]:
        out.append(f"results/{vol}/plots/energy_maps.png")
        out.append(f"results/{vol}/plots/orientation_distribution.png")
    if ORIENTATION:
        out.append(f"results/{vol}/plots/orientation_slice.png")
    if THICKNESS["enabled"]:
        out += [
            f"results/{vol}/plots/thickness_histogram.png",
            f"results/{vol}/plots/thickness_slice.png",
        ]
    return out


def all_outputs():
    outputs = []
    for vol in VOLUMES:
        outputs.append(store(f"results/{vol}/volume.zarr"))
        if SWEEP["enabled"]:
            outputs.append(f"results/{vol}/sweep.nc")
        if ORIENTATION:
            outputs.append(store(f"results/{vol}/orientation.zarr"))
        if THICKNESS["enabled"]:
            outputs += [
                f"results/{vol}/thickness.nc",
                store(f"results/{vol}/thickness.zarr"),
            ]
        outputs += figures(vol)
    if SWEEP["enabled"]:
        outputs.append("results/summary/sweep.nc")
    if THICKNESS["enabled"]:
        outputs.append("results/summary/thickness.nc")
    return outputs
