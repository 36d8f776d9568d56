# Aggregate: per-volume datasets from the blocks and chunks, then summaries over volumes.


rule aggregate_sweep:
    input:
        blocks=sweep_block_files,
        volume="results/{vol}/volume.zarr",
    output:
        "results/{vol}/sweep.nc",
    params:
        provenance=PROVENANCE,
    log:
        "logs/{vol}/aggregate_sweep.log",
    conda:
        ENV
    script:
        "../scripts/aggregate_sweep.py"


rule aggregate_thickness:
    input:
        chunks=thickness_chunk_files,
        rmax="results/{vol}/thickness/rmax.json",
        volume="results/{vol}/volume.zarr",
    output:
        "results/{vol}/thickness.nc",
    params:
        bins=THICKNESS["bins"],
        provenance=PROVENANCE,
    log:
        "logs/{vol}/aggregate_thickness.log",
    conda:
        ENV
    script:
        "../scripts/aggregate_thickness.py"


rule summary:
    input:
        expand("results/{vol}/{{kind}}.nc", vol=list(VOLUMES)),
    output:
        "results/summary/{kind}.nc",
    params:
        names=list(VOLUMES),
    wildcard_constraints:
        kind="sweep|thickness",
    log:
        "logs/summary/{kind}.log",
    conda:
        ENV
    script:
        "../scripts/summary.py"
