# Aggregate: split sweeps and chunked thickness merged per volume, then summaries over volumes.


rule aggregate_sweep:
    input:
        **(
            {"orientation": store("results/{vol}/orientation.zarr")}
            if ORIENTATION
            else {}
        ),
        blocks=sweep_block_files,
        volume=store("results/{vol}/volume.zarr"),
    output:
        "results/{vol}/sweep.nc",
    log:
        "logs/{vol}/aggregate_sweep.log",
    wildcard_constraints:
        vol=SWEEP_SPLIT,
    conda:
        ENV
    params:
        provenance=PROVENANCE,
    script:
        "../scripts/aggregate_sweep.py"


rule orientation_map:
    input:
        orientation_block_files,
    output:
        store("results/{vol}/orientation.zarr"),
    log:
        "logs/{vol}/orientation_map.log",
    benchmark:
        "logs/{vol}/orientation_map.benchmark.tsv"
    wildcard_constraints:
        vol=SWEEP_SPLIT,
    retries: RETRIES
    conda:
        ENV
    threads: 4
    resources:
        mem_mb=lambda wildcards, attempt: attempt
        * int(2 * volume_nbytes(wildcards.vol) / MB + 512),
    params:
        theta=THETA.tolist(),
        phi=PHI.tolist(),
        xi=SWEEP["xi"],
        provenance=PROVENANCE,
    script:
        "../scripts/orientation_map.py"


rule aggregate_thickness:
    input:
        chunks=thickness_chunk_files,
        shards=thickness_shard_files,
        store=store("results/{vol}/thickness.zarr"),
        rmax="results/{vol}/thickness/rmax.json",
        volume=store("results/{vol}/volume.zarr"),
    output:
        "results/{vol}/thickness.nc",
    log:
        "logs/{vol}/aggregate_thickness.log",
    wildcard_constraints:
        vol=THICKNESS_SPLIT,
    conda:
        ENV
    params:
        bins=THICKNESS["bins"],
        provenance=PROVENANCE,
    script:
        "../scripts/aggregate_thickness.py"


rule summary:
    input:
        expand("results/{vol}/{{kind}}.nc", vol=list(VOLUMES)),
    output:
        "results/summary/{kind}.nc",
    log:
        "logs/summary/{kind}.log",
    wildcard_constraints:
        kind="sweep|thickness",
    conda:
        ENV
    params:
        names=list(VOLUMES),
    script:
        "../scripts/summary.py"
