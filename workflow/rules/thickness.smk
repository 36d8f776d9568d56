# Local thickness: by default one job per volume (the whole volume in one call). A
# volume beyond host_memory_mb (or with an explicit thickness.chunk) takes a
# distance pass for R_max, an empty shard-aligned store, then one job per chunk
# (core + halo in, core out) that writes only its own shards.
# The whole-volume job needs a GPU for about a second: it takes gpu=0 and shares the
# device with a sweep (volsweep.devices.claim_gpu, shared); out of device memory, it
# finishes on the CPU, to the same exact result. Cluster profiles give it its own GPU.


rule thickness:
    input:
        volume=store("results/{vol}/volume.zarr"),
    output:
        zarr=store("results/{vol}/thickness.zarr"),
        nc="results/{vol}/thickness.nc",
    log:
        "logs/{vol}/thickness.log",
    benchmark:
        "logs/{vol}/thickness.benchmark.tsv"
    wildcard_constraints:
        vol=THICKNESS_WHOLE,
    retries: RETRIES
    conda:
        ENV
    resources:
        gpu=0,
        mem_mb=thickness_mem_mb,
    params:
        thickness=THICKNESS,
        device=config["device"],
        provenance=PROVENANCE,
    script:
        "../scripts/thickness.py"


rule thickness_rmax:
    input:
        volume=store("results/{vol}/volume.zarr"),
    output:
        "results/{vol}/thickness/rmax.json",
    log:
        "logs/{vol}/thickness/rmax.log",
    benchmark:
        "logs/{vol}/thickness/rmax.benchmark.tsv"
    wildcard_constraints:
        vol=THICKNESS_SPLIT,
    retries: RETRIES
    conda:
        ENV
    resources:
        gpu=USES_GPU,
        mem_mb=lambda wildcards, attempt: attempt
        * int(4 * volume_nbytes(wildcards.vol) / MB + 512),
    params:
        thickness=THICKNESS,
        device=config["device"],
        chunk=lambda wildcards: THICKNESS_CHUNK[wildcards.vol],
    script:
        "../scripts/thickness_rmax.py"


rule thickness_store:
    input:
        volume=store("results/{vol}/volume.zarr"),
    output:
        store("results/{vol}/thickness.zarr"),
    log:
        "logs/{vol}/thickness/store.log",
    wildcard_constraints:
        vol=THICKNESS_SPLIT,
    conda:
        ENV
    params:
        chunk=lambda wildcards: THICKNESS_CHUNK[wildcards.vol],
    script:
        "../scripts/thickness_store.py"


rule thickness_chunk:
    input:
        volume=store("results/{vol}/volume.zarr"),
        store=store("results/{vol}/thickness.zarr"),
        rmax="results/{vol}/thickness/rmax.json",
    output:
        shard="results/{vol}/thickness.zarr/0/c/{i}/{j}/{k}",
        counts="results/{vol}/thickness/chunks/{i}_{j}_{k}.npz",
    log:
        "logs/{vol}/thickness/chunks/{i}_{j}_{k}.log",
    benchmark:
        "logs/{vol}/thickness/chunks/{i}_{j}_{k}.benchmark.tsv"
    wildcard_constraints:
        vol=THICKNESS_SPLIT,
        i=r"\d+",
        j=r"\d+",
        k=r"\d+",
    retries: RETRIES
    conda:
        ENV
    resources:
        gpu=USES_GPU,
        mem_mb=lambda wildcards, attempt: attempt
        * int(8 * volume_nbytes(wildcards.vol) / MB + 512),
    params:
        chunk=lambda wildcards: THICKNESS_CHUNK[wildcards.vol],
        thickness=THICKNESS,
        device=config["device"],
    script:
        "../scripts/thickness_chunk.py"
