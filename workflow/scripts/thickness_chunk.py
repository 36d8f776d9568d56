# Snakemake script: log to log[0], then one package call.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # volsweep, when not pip-installed
from volsweep.pipeline import run_script, thickness_chunk

p = snakemake.params
run_script(thickness_chunk, snakemake, volume_zarr=snakemake.input.volume,
           thickness_zarr=snakemake.input.store, rmax_json=snakemake.input.rmax,
           out_npz=snakemake.output[0], index=int(snakemake.wildcards.chunk), chunk=p.chunk,
           threshold=p.threshold, label=p.label, invert=p.invert, device=p.device)
