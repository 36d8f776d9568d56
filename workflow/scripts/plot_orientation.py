# Snakemake script (`snakemake` is injected): log to log[0], then one package call.
from volsweep.steps import figures
from volsweep.steps.runner import run_script

run_script(figures.plot_orientation, snakemake, volume_zarr=snakemake.input.volume,
           orientation_zarr=snakemake.input.orientation, out_png=snakemake.output[0],
           axis=snakemake.params.axis, name=snakemake.wildcards.vol)
