"""The history the metric-source tests and the demo load into Prometheus is what the exporters publish: the writer's
metric names and labels are those of the hand-written exposition fixtures (tests/fixtures/prometheus,
README.md there cites their sources), read by prometheus_client's parsers."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families as exposition_families

from fmdoctor.demo.openmetrics import OpenMetricsWriter

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "prometheus"
SCRAPER_LABELS = {"instance", "job"}


def shapes(families) -> dict[str, set[frozenset[str]]]:
    found: dict[str, set[frozenset[str]]] = {}
    for family in families:
        for sample in family.samples:
            found.setdefault(sample.name, set()).add(frozenset(sample.labels) - SCRAPER_LABELS)
    return found


def test_the_writer_publishes_the_exporters_names_and_labels():
    exporter = shapes(exposition_families((FIXTURES / "dcgm-exporter-p5.prom").read_text()))
    exporter |= shapes(exposition_families((FIXTURES / "efa-exporter-p5.prom").read_text()))
    writer = OpenMetricsWriter(datetime.now(UTC))
    writer.dcgm_node({"Hostname": "ip-10-1-201-66", "instance": "10.1.201.66:9400", "job": "dcgm_exporter"}, 95.0,
                     tensor_active=0.44)
    writer.efa_node({"instance": "10.1.201.66:9100", "job": "efa_node_exporter"}, ["rdmap16s27", "rdmap32s27"])
    written = shapes(openmetrics_families(writer.text()))

    efa = {name for name in written if name.startswith("node_amazonefa_")}
    assert efa and all(f"{name}_total" in exporter or name in exporter for name in efa)
    dcgm = set(written) - efa
    assert dcgm == {name for name in exporter if name.startswith("DCGM_")} - {"DCGM_FI_DEV_MEM_CLOCK",
                                                                              "DCGM_FI_DEV_GPU_TEMP"}
    for name in written:
        expected = exporter.get(name) or exporter[f"{name}_total"]
        assert written[name] == expected, name
