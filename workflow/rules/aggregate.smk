# Aggregate: split sweeps and chunked thickness merged per volume, then summaries over volumes.


rule aggregate_sweep:
    input:
        blocks=sweep_block_files,
        volume=store("results/{vol}/volume.zarr"),
        **({"orientation": store("results/{vol}/orientation.zarr")} if ORIENTATION else {}),
    output:
        "results/{vol}/sweep.nc",
    wildcard_constraints:
        vol=SWEEP_SPLIT,
    params:
        provenance=PROVENANCE,
    log:
        "logs/{vol}/aggregate_sweep.log",
    conda:
        ENV
    script:
        "../scripts/aggregate_sweep.py"


rule orientation_map:
    input:
        orientation_block_files,
    output:
        store("results/{vol}/orientation.zarr"),
    wildcard_constraints:
        vol=SWEEP_SPLIT,
    params:
        theta=THETA.tolist(),
        phi=PHI.tolist(),
        xi=SWEEP["xi"],
        provenance=PROVENANCE,
    log:
        "logs/{vol}/orientation_map.log",
    benchmark:
        "logs/{vol}/orientation_map.benchmark.tsv"
    threads: 4
    retries: RETRIES
    resources:
        mem_mb=lambda wildcards, attempt: attempt * int(2 * volume_nbytes(wildcards.vol) / MB + 512),
    conda:
        ENV
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
    wildcard_constraints:
        vol=THICKNESS_SPLIT,
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
