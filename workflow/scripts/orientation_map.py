# Snakemake script (`snakemake` is injected): log to log[0], then one package call.
from volsweep.steps import sweep as step
from volsweep.steps.runner import run_script

p = snakemake.params
run_script(step.merge_orientation, snakemake, block_zarrs=list(snakemake.input),
           out_zarr=snakemake.output[0], theta=p.theta, phi=p.phi, xi=p.xi,
           provenance=p.provenance, threads=snakemake.threads)
