# Snakemake script: log to log[0], then one package call.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # volsweep, when not pip-installed
from volsweep.pipeline import aggregate_thickness, run_script

run_script(aggregate_thickness, snakemake, chunk_npzs=list(snakemake.input.chunks),
           rmax_json=snakemake.input.rmax, volume_zarr=snakemake.input.volume,
           out_nc=snakemake.output[0], bins=snakemake.params.bins,
           provenance=snakemake.params.provenance)
