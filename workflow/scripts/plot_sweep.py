# Snakemake script: log to log[0], then one package call.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # volsweep, when not pip-installed
from volsweep.pipeline import plot_sweep, run_script

run_script(plot_sweep, snakemake, sweep_nc=snakemake.input[0], out_png=snakemake.output[0],
           name=snakemake.wildcards.vol)
