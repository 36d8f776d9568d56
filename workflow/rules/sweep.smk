# Sweep: by default one job per volume, the whole (theta, phi, xi) grid against one FFT
# of the volume, writing sweep.nc and orientation.zarr directly. A volume whose
# estimated compute exceeds sweep.job_minutes (or sweep.min_jobs > 1) is split into
# theta blocks, merged by aggregate_sweep and orientation_map.


rule sweep:
    input:
        unpack(sweep_inputs),
    output:
        **(
            {"orientation": store("results/{vol}/orientation.zarr")}
            if ORIENTATION
            else {}
        ),
        nc="results/{vol}/sweep.nc",
    log:
        "logs/{vol}/sweep.log",
    benchmark:
        "logs/{vol}/sweep.benchmark.tsv"
    wildcard_constraints:
        vol=SWEEP_WHOLE,
    retries: RETRIES
    conda:
        ENV
    threads: sweep_threads
    resources:
        gpu=USES_GPU,
        mem_mb=sweep_mem_mb,
    params:
        theta=THETA.tolist(),
        phi=PHI.tolist(),
        sweep=SWEEP,
        device=config["device"],
        device_memory_mb=config["device_memory_mb"],
        provenance=PROVENANCE,
    script:
        "../scripts/sweep.py"


rule sweep_block:
    input:
        unpack(sweep_inputs),
    output:
        **(
            {
                "orientation": temp(
                    directory("results/{vol}/sweep/{block}.orientation.zarr")
                )
            }
            if ORIENTATION
            else {}
        ),
        nc="results/{vol}/sweep/{block}.nc",
    log:
        "logs/{vol}/sweep/{block}.log",
    benchmark:
        "logs/{vol}/sweep/{block}.benchmark.tsv"
    wildcard_constraints:
        vol=SWEEP_SPLIT,
    retries: RETRIES
    conda:
        ENV
    threads: SWEEP_THREADS
    resources:
        gpu=USES_GPU,
        mem_mb=sweep_mem_mb,
    params:
        theta=block_theta,
        theta_offset=block_theta_offset,
        phi=PHI.tolist(),
        sweep=SWEEP,
        device=config["device"],
        device_memory_mb=config["device_memory_mb"],
        provenance=PROVENANCE,
    script:
        "../scripts/sweep.py"
