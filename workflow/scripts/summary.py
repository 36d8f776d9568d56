# Snakemake script: log to log[0], then one package call.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # volsweep, when not pip-installed
from volsweep.pipeline import run_script, summarize

run_script(summarize, snakemake, paths=list(snakemake.input), names=snakemake.params.names,
           out_nc=snakemake.output[0])
