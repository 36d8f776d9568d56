# Snakemake script (`snakemake` is injected): log to log[0], then one package call.
from volsweep.steps import thickness as step
from volsweep.steps.runner import run_script

p, w = snakemake.params, snakemake.wildcards
run_script(step.thickness_chunk, snakemake, volume_zarr=snakemake.input.volume,
           thickness_zarr=snakemake.input.store, rmax_json=snakemake.input.rmax,
           out_npz=snakemake.output.counts, shard=(int(w.i), int(w.j), int(w.k)), chunk=p.chunk,
           thickness=p.thickness, device=p.device)
