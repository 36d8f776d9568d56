# Snakemake script: log to log[0], then one package call.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # volsweep, when not pip-installed
from volsweep.pipeline import plot_orientation, run_script

run_script(plot_orientation, snakemake, volume_zarr=snakemake.input.volume,
           orientation_zarr=snakemake.input.orientation, out_png=snakemake.output[0],
           axis=snakemake.params.axis, name=snakemake.wildcards.vol)
