# Snakemake script (`snakemake` is injected): log to log[0], then one package call.
from volsweep.steps import thickness as step
from volsweep.steps.runner import run_script

p = snakemake.params
run_script(step.create_thickness_store, snakemake, volume_zarr=snakemake.input.volume,
           out_zarr=snakemake.output[0], chunk=p.chunk)
