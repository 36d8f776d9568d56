# Snakemake script: log to log[0], then one package call.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # volsweep, when not pip-installed
from volsweep.pipeline import merge_orientation, run_script

p = snakemake.params
run_script(merge_orientation, snakemake, block_zarrs=list(snakemake.input), out_zarr=snakemake.output[0],
           theta=p.theta, phi=p.phi, xi=p.xi, provenance=p.provenance)
