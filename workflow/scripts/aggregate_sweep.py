# Snakemake script (`snakemake` is injected): log to log[0], then one package call.
from volsweep import pipeline
from volsweep.runner import run_script

run_script(pipeline.aggregate_sweep, snakemake, block_ncs=list(snakemake.input.blocks),
           volume_zarr=snakemake.input.volume, out_nc=snakemake.output[0],
           provenance=snakemake.params.provenance,
           orientation_zarr=snakemake.input.get("orientation"))
