# Snakemake script: log to log[0], then one package call.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # volsweep, when not pip-installed
from volsweep.pipeline import create_thickness_store, run_script

p = snakemake.params
run_script(create_thickness_store, snakemake, volume_zarr=snakemake.input[0],
           out_zarr=snakemake.output[0], chunks=p.chunks, chunk=p.chunk)
