# Snakemake script: log to log[0], then one package call.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir).parent))  # volsweep, when not pip-installed
from volsweep.pipeline import ingest_volume, run_script

p = snakemake.params
run_script(ingest_volume, snakemake, entry=p.entry, name=snakemake.wildcards.vol,
           out=snakemake.output[0], chunks=p.chunks, shards=p.shards,
           memory_budget_mb=p.memory_budget_mb)
