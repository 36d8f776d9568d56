# volsweep: oriented-wavelet sweeps and exact local thickness of 3D volumes.
# Configuration: config.yaml (validated against workflow/schemas/config.schema.yaml).
import sys
from pathlib import Path

# volsweep from this checkout, for the parse, when it is not pip-installed.
sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from volsweep.config import validate_config

# The demo config, unless --configfile names another (which then replaces it, not merges).
if not workflow.overwrite_configfiles:

    configfile: "config.yaml"


CONFIGFILES = ", ".join(map(str, workflow.overwrite_configfiles or ["config.yaml"]))
validate_config(config, configfile=CONFIGFILES)


include: "workflow/rules/common.smk"
include: "workflow/rules/ingest.smk"
include: "workflow/rules/sweep.smk"
include: "workflow/rules/thickness.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/report.smk"


rule all:
    default_target: True
    input:
        all_outputs(),
