# Snakemake script: log to log[0], then one package call.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # volsweep, when not pip-installed
from volsweep.pipeline import run_script, sweep_block

p = snakemake.params
run_script(sweep_block, snakemake, volume_zarr=snakemake.input[0], out_nc=snakemake.output.nc,
           theta=p.theta, phi=p.phi, xi=p.xi, a=p.a, mode=p.mode, truncate=p.truncate,
           stats=p.stats, device=p.device, memory_budget_mb=p.memory_limit_mb,
           block=int(snakemake.wildcards.block), theta_offset=p.theta_offset,
           orientation_zarr=snakemake.output.get("orientation"))
