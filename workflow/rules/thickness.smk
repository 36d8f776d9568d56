# Local thickness: a distance pass for R_max, an empty shard-aligned store, then
# one job per chunk (core + halo in, core out) that writes only its own shards.


rule thickness_rmax:
    input:
        "results/{vol}/volume.zarr",
    output:
        "results/{vol}/thickness/rmax.json",
    params:
        threshold=THICKNESS["threshold"],
        label=THICKNESS["label"],
        invert=THICKNESS["invert"],
        device=config["device"],
    log:
        "logs/{vol}/thickness/rmax.log",
    benchmark:
        "logs/{vol}/thickness/rmax.benchmark.tsv"
    retries: RETRIES
    resources:
        gpu=USES_GPU,
        mem_mb=lambda wildcards, attempt: attempt * int(4 * volume_nbytes(wildcards.vol) / MB + 512),
    conda:
        ENV
    script:
        "../scripts/thickness_rmax.py"


rule thickness_store:
    input:
        "results/{vol}/volume.zarr",
    output:
        directory("results/{vol}/thickness.zarr"),
    params:
        chunks=config["storage"]["chunks"],
        chunk=THICKNESS["chunk"],
    log:
        "logs/{vol}/thickness/store.log",
    conda:
        ENV
    script:
        "../scripts/thickness_store.py"


rule thickness_chunk:
    input:
        volume="results/{vol}/volume.zarr",
        store="results/{vol}/thickness.zarr",
        rmax="results/{vol}/thickness/rmax.json",
    output:
        "results/{vol}/thickness/chunks/{chunk}.npz",
    params:
        chunk=THICKNESS["chunk"],
        threshold=THICKNESS["threshold"],
        label=THICKNESS["label"],
        invert=THICKNESS["invert"],
        device=config["device"],
    log:
        "logs/{vol}/thickness/chunks/{chunk}.log",
    benchmark:
        "logs/{vol}/thickness/chunks/{chunk}.benchmark.tsv"
    retries: RETRIES
    resources:
        gpu=USES_GPU,
        mem_mb=lambda wildcards, attempt: attempt * int(8 * volume_nbytes(wildcards.vol) / MB + 512),
    conda:
        ENV
    script:
        "../scripts/thickness_chunk.py"
