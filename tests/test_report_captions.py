"""The report's captions render with docutils without a single system message."""

from pathlib import Path

import docutils.core
import docutils.utils
import pytest

CAPTIONS = sorted((Path(__file__).resolve().parents[1] / "workflow" / "report").glob("*.rst"))


def test_there_are_captions():
    assert len(CAPTIONS) >= 4


@pytest.mark.parametrize("path", CAPTIONS, ids=lambda p: p.name)
def test_caption_renders_cleanly(path):
    # Snakemake fills the Jinja2 template first; a stand-in value for snakemake.config keeps rst intact.
    text = path.read_text().replace('{{ snakemake.config["volumes"] | length }}', "2")
    messages = []
    settings = {"report_level": docutils.utils.Reporter.INFO_LEVEL, "halt_level": 5,
                "warning_stream": False}
    doc = docutils.core.publish_doctree(text, settings_overrides=settings)
    messages = [m.astext() for m in doc.findall(docutils.nodes.system_message)]
    problematic = [n.astext() for n in doc.findall(docutils.nodes.problematic)]
    assert messages == [] and problematic == [], (path.name, messages)
