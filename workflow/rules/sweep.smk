# Sweep: one job per (volume, parameter block); a block is a run of theta values
# over every phi and xi.


rule sweep_block:
    input:
        "results/{vol}/volume.zarr",
    output:
        nc="results/{vol}/sweep/{block}.nc",
        **ORIENTATION_BLOCK_OUTPUT,
    params:
        theta=lambda wildcards: THETA[BLOCKS[int(wildcards.block)]].tolist(),
        phi=PHI.tolist(),
        xi=SWEEP["xi"],
        a=SWEEP["a"],
        mode=SWEEP["mode"],
        truncate=SWEEP["truncate"],
        stats=SWEEP["stats"],
        device=config["device"],
        theta_offset=lambda wildcards: int(BLOCKS[int(wildcards.block)][0]),
        memory_limit_mb=SWEEP["memory_limit_mb"],
    log:
        "logs/{vol}/sweep/{block}.log",
    benchmark:
        "logs/{vol}/sweep/{block}.benchmark.tsv"
    threads: 2
    retries: RETRIES
    resources:
        gpu=USES_GPU,
        mem_mb=lambda wildcards, attempt: attempt * int(8 * volume_nbytes(wildcards.vol) / MB + 512),
    conda:
        ENV
    script:
        "../scripts/sweep_block.py"
