# Snakemake script (`snakemake` is injected): log to log[0], then one package call.
from volsweep.steps import ingest as step
from volsweep.steps.runner import run_script

p = snakemake.params
run_script(step.ingest_volume, snakemake, entry=p.entry, name=snakemake.wildcards.vol,
           out=snakemake.output[0], chunks=p.chunks, shards=p.shards,
           buffer_mb=p.buffer_mb, phase=p.phase)
