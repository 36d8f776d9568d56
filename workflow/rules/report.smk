# Report: PNG figures with captions, collected by `snakemake --report report.html`.


report: "../report/workflow.rst"


rule plot_sweep:
    input:
        "results/{vol}/sweep.nc",
    output:
        report(
            "results/{vol}/plots/energy_maps.png",
            caption="../report/energy_maps.rst",
            category="Sweep",
            subcategory="{vol}",
        ),
    log:
        "logs/{vol}/plot_sweep.log",
    conda:
        ENV
    script:
        "../scripts/plot_sweep.py"


rule plot_orientation_distribution:
    input:
        "results/{vol}/sweep.nc",
    output:
        report(
            "results/{vol}/plots/orientation_distribution.png",
            caption="../report/orientation_distribution.rst",
            category="Sweep",
            subcategory="{vol}",
        ),
    log:
        "logs/{vol}/plot_orientation_distribution.log",
    conda:
        ENV
    script:
        "../scripts/plot_orientation_distribution.py"


rule plot_orientation:
    input:
        volume=store("results/{vol}/volume.zarr"),
        orientation=store("results/{vol}/orientation.zarr"),
    output:
        report(
            "results/{vol}/plots/orientation_slice.png",
            caption="../report/orientation_slice.rst",
            category="Sweep",
            subcategory="{vol}",
        ),
    log:
        "logs/{vol}/plot_orientation.log",
    conda:
        ENV
    params:
        axis=REPORT["slice_axis"],
    script:
        "../scripts/plot_orientation.py"


rule plot_thickness:
    input:
        nc="results/{vol}/thickness.nc",
        volume=store("results/{vol}/volume.zarr"),
        thickness=store("results/{vol}/thickness.zarr"),
    output:
        histogram=report(
            "results/{vol}/plots/thickness_histogram.png",
            caption="../report/thickness_histogram.rst",
            category="Local thickness",
            subcategory="{vol}",
        ),
        slice=report(
            "results/{vol}/plots/thickness_slice.png",
            caption="../report/thickness_slice.rst",
            category="Local thickness",
            subcategory="{vol}",
        ),
    log:
        "logs/{vol}/plot_thickness.log",
    conda:
        ENV
    params:
        axis=REPORT["slice_axis"],
    script:
        "../scripts/plot_thickness.py"
