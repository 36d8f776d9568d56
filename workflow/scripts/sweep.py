# Snakemake script (`snakemake` is injected): log to log[0], then one package call.
from volsweep.steps import sweep as step
from volsweep.steps.runner import run_script

p, w = snakemake.params, snakemake.wildcards
run_script(step.sweep, snakemake, prefetch_at_start=False, volume_zarr=snakemake.input.volume,
           out_nc=snakemake.output.nc, theta=p.theta, phi=p.phi, sweep=p.sweep, device=p.device, provenance=p.provenance,
           device_memory_mb=p.device_memory_mb, thickness_nc=snakemake.input.get("thickness"),
           orientation_zarr=snakemake.output.get("orientation"),
           block=int(w.block) if "block" in w.keys() else None,
           theta_offset=p.get("theta_offset", 0))
