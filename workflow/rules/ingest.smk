# Ingest: any input format becomes a float32 Zarr v3 store, streamed block by block.


rule ingest:
    input:
        source_files,
    output:
        store("results/{vol}/volume.zarr"),
    log:
        "logs/{vol}/ingest.log",
    benchmark:
        "logs/{vol}/ingest.benchmark.tsv"
    conda:
        ENV
    resources:
        mem_mb=lambda wildcards, attempt: attempt
        * int(2 * config["ingest_buffer_mb"] + 256),
    params:
        entry=lambda wildcards: VOLUMES[wildcards.vol],
        chunks=config["storage"]["chunks"],
        shards=config["storage"]["shards"],
        buffer_mb=config["ingest_buffer_mb"],
        phase=PHASE_RULE,
    script:
        "../scripts/ingest.py"
