# Snakemake script (`snakemake` is injected): log to log[0], then one package call.
from volsweep.steps import sweep as step
from volsweep.steps.runner import run_script

run_script(step.aggregate_sweep, snakemake, block_ncs=list(snakemake.input.blocks),
           volume_zarr=snakemake.input.volume, out_nc=snakemake.output[0],
           provenance=snakemake.params.provenance,
           orientation_zarr=snakemake.input.get("orientation"))
