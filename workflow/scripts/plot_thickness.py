# Snakemake script: log to log[0], then one package call.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # volsweep, when not pip-installed
from volsweep.pipeline import plot_thickness, run_script

run_script(plot_thickness, snakemake, thickness_nc=snakemake.input.nc,
           volume_zarr=snakemake.input.volume, thickness_zarr=snakemake.input.thickness,
           hist_png=snakemake.output.histogram, slice_png=snakemake.output.slice,
           axis=snakemake.params.axis, name=snakemake.wildcards.vol)
