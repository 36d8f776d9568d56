# Snakemake script (`snakemake` is injected): log to log[0], then one package call.
from volsweep.steps import thickness as step
from volsweep.steps.runner import run_script

run_script(step.aggregate_thickness, snakemake, chunk_npzs=list(snakemake.input.chunks),
           rmax_json=snakemake.input.rmax, volume_zarr=snakemake.input.volume,
           thickness_zarr=snakemake.input.store, out_nc=snakemake.output[0],
           bins=snakemake.params.bins, provenance=snakemake.params.provenance)
