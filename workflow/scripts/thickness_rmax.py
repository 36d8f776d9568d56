# Snakemake script: log to log[0], then one package call.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # volsweep, when not pip-installed
from volsweep.pipeline import run_script, thickness_rmax

p = snakemake.params
run_script(thickness_rmax, snakemake, volume_zarr=snakemake.input[0], out_json=snakemake.output[0],
           threshold=p.threshold, label=p.label, invert=p.invert, device=p.device,
           name=snakemake.wildcards.vol)
