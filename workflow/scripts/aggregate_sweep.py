# Snakemake script: log to log[0], then one package call.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # volsweep, when not pip-installed
from volsweep.pipeline import aggregate_sweep, run_script

run_script(aggregate_sweep, snakemake, block_ncs=list(snakemake.input.blocks),
           volume_zarr=snakemake.input.volume, out_nc=snakemake.output[0],
           provenance=snakemake.params.provenance)
