# Snakemake script (`snakemake` is injected): log to log[0], then one package call.
from volsweep.steps import figures
from volsweep.steps.runner import run_script

run_script(figures.plot_thickness, snakemake, thickness_nc=snakemake.input.nc,
           volume_zarr=snakemake.input.volume, thickness_zarr=snakemake.input.thickness,
           hist_png=snakemake.output.histogram, slice_png=snakemake.output.slice,
           axis=snakemake.params.axis, name=snakemake.wildcards.vol)
