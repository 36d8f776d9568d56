# Snakemake script (`snakemake` is injected): log to log[0], then one package call.
from volsweep.steps import thickness as step
from volsweep.steps.runner import run_script

p = snakemake.params
run_script(step.thickness_rmax, snakemake, volume_zarr=snakemake.input.volume,
           out_json=snakemake.output[0], thickness=p.thickness, device=p.device,
           name=snakemake.wildcards.vol, chunk=p.chunk)
