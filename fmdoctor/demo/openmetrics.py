"""What NVIDIA's DCGM exporter and the EFA exporter publish, as OpenMetrics history for Prometheus's backfill
(``promtool tsdb create-blocks-from openmetrics``): for the demo and the tests.

Series, help texts and labels follow the exporters' own output:

* DCGM exporter (NVIDIA/dcgm-exporter README and etc/default-counters.csv; a HyperPod capture:
  ``DCGM_FI_DEV_MEMORY_TEMP{DCGM_FI_DRIVER_VERSION="570.172.08", Hostname="ip-10-1-201-66",
  UUID="GPU-...", device="nvidia0", gpu="0", instance="localhost:9400", job="dcgm_exporter",
  modelName="NVIDIA A10G", pci_bus_id="00000000:00:1B.0"}``): one series per GPU with ``gpu``, ``UUID``,
  ``pci_bus_id``, ``device``, ``modelName``, ``Hostname`` and ``DCGM_FI_DRIVER_VERSION``, plus what the
  scraper adds (``instance``, ``job``; ``instance_id`` where an ec2_sd_configs relabel copies it, as
  aws-samples/awsome-distributed-training 4.validation_and_observability/4.prometheus-grafana's
  prometheus-agent-collector.yaml does). Profiling fields (DCGM_FI_PROF_*) are 0-1 ratios.
* EFA exporter (aws-samples/awsome-distributed-training 4.validation_and_observability/3.efa-node-exporter,
  amazon_efa_linux.go): ``node_amazonefa_<hw counter>{device="rdmapXsY",port="1"}``, cumulative.

Each period's GPU values are those :class:`fmdoctor.demo.metrics.MetricsPublisher` publishes to CloudWatch for
the same story (:func:`fmdoctor.demo.metrics.gpu_sample`), held for every scrape (a minute apart) of the
period, so a CloudWatch and a Prometheus fed one story answer the same per-period averages.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from fmdoctor.demo.metrics import H100, gpu_sample

DCGM_FAMILIES = {
    "DCGM_FI_DEV_SM_CLOCK": "SM clock frequency (in MHz).",
    "DCGM_FI_DEV_POWER_USAGE": "Power draw (in W).",
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_XID_ERRORS": "Value of the last XID error encountered.",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "Whether remapping of rows has failed",
    # A counter in the exporter; written as a gauge since OpenMetrics names counters ..._total.
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "Total number of double-bit volatile ECC errors.",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "Ratio of time the graphics engine is active.",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "Ratio of cycles the tensor (HMMA) pipe is active.",
}
EFA_FAMILIES = {
    "rx_drops": "Number of packets droped",
    "rdma_read_wr_err": "Number of read write errors with RDMA",
    "rdma_write_wr_err": "Number of bytes wrote wr with error RDMA",
    "rdma_read_bytes": "Number of bytes read with RDMA",
    "rdma_write_bytes": "Number of bytes wrote with RDMA",
}
RESERVED_MIB = 480.0  # framebuffer the driver keeps: FB_USED + FB_FREE is a little under the board's total
DRIVER = "550.127.05"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


@dataclass
class OpenMetricsWriter:
    now: datetime
    period: timedelta = timedelta(minutes=5)
    periods: int = 6
    scrape: timedelta = timedelta(seconds=60)  # Prometheus's default scrape_interval
    samples: dict[str, list[str]] = field(default_factory=dict)  # family -> sample lines

    def _times(self, k: int) -> list[float]:
        """Scrape times inside period k (0 = the latest): (now - (k+1)*period, now - k*period]."""
        end = (self.now - self.period * k).timestamp()
        count = int(self.period / self.scrape)
        return [end - self.scrape.total_seconds() * (count - 1 - j) - 1 for j in range(count)]

    def _add(self, family: str, labels: dict[str, str], points: list[tuple[float, float]]) -> None:
        lines = self.samples.setdefault(family, [])
        text = _labels(labels)
        lines.extend(f"{family}{text} {value:g} {when:.3f}" for when, value in points)

    def dcgm_node(
        self,
        labels: dict[str, str],
        utilization: float | Sequence[float],
        *,
        gpus: int = 8,
        gpu: tuple[str, float] = H100,
        memory_percent: float | Sequence[float] = 80.0,
        by_period: dict[int, dict[str, Sequence[float]]] | None = None,
        power_w: float | None = None,
        sm_clock_mhz: float | None = None,
        tensor_active: float | None = None,
        xid: dict[int, tuple[int, int]] | None = None,
        row_remap_failure: dict[int, int] | None = None,
        ecc_dbe: dict[int, tuple[int, int]] | None = None,
    ) -> None:
        """One node's DCGM exporter series. ``labels`` name the node (Hostname, instance, job...); ``tensor_active``
        is the 0-1 ratio of a busy GPU (profiling metrics are left out when None); ``xid`` maps a GPU to
        (code, the oldest-first period from which DCGM_FI_DEV_XID_ERRORS holds it); ``row_remap_failure`` maps a
        GPU to the oldest-first period from which DCGM_FI_DEV_ROW_REMAP_FAILURE is 1; ``ecc_dbe`` maps a GPU to
        (count, the oldest-first period from which DCGM_FI_DEV_ECC_DBE_VOL_TOTAL holds it); ECC is written only
        when given, as the exporter's default counters leave it out."""
        name, total = gpu
        for index in range(gpus):
            digest = hashlib.sha1(f"{labels.get('Hostname')}/{index}".encode()).hexdigest()  # noqa: S324 (an id)
            series = {"gpu": str(index),
                      "UUID": f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}",
                      "pci_bus_id": f"00000000:{0x53 + 0x10 * index:02X}:00.0", "device": f"nvidia{index}",
                      "modelName": name, **labels, "DCGM_FI_DRIVER_VERSION": DRIVER}
            values: dict[str, list[tuple[float, float]]] = {}
            for k in range(self.periods):
                oldest_first = self.periods - 1 - k
                util = utilization[index] if isinstance(utilization, Sequence) else utilization
                memory = memory_percent[index] if isinstance(memory_percent, Sequence) else memory_percent
                trend = (by_period or {}).get(index, {})
                sample = gpu_sample(name, total, trend["utilization"][oldest_first] if "utilization" in trend else util,
                                    trend["memory_percent"][oldest_first] if "memory_percent" in trend else memory,
                                    index, k, power_w, sm_clock_mhz)
                code = 0
                if xid and index in xid and oldest_first >= xid[index][1]:
                    code = xid[index][0]
                period = {
                    "DCGM_FI_DEV_GPU_UTIL": sample["utilization"],
                    "DCGM_FI_DEV_FB_USED": sample["memory_used"],
                    "DCGM_FI_DEV_FB_FREE": max(0.0, total - sample["memory_used"] - RESERVED_MIB),
                    "DCGM_FI_DEV_POWER_USAGE": sample["power"],
                    "DCGM_FI_DEV_SM_CLOCK": sample["sm_clock"],
                    "DCGM_FI_DEV_XID_ERRORS": float(code),
                    "DCGM_FI_DEV_ROW_REMAP_FAILURE": float(
                        index in (row_remap_failure or {}) and oldest_first >= (row_remap_failure or {})[index]),
                }
                if ecc_dbe is not None:
                    count, since = ecc_dbe.get(index, (0, 0))
                    period["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] = float(count if oldest_first >= since else 0)
                if tensor_active is not None:
                    busy = sample["utilization"] / 100
                    period["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] = round(busy, 4)
                    period["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] = round(tensor_active * busy, 4)
                for family, value in period.items():
                    values.setdefault(family, []).extend((t, value) for t in self._times(k))
            for family, points in values.items():
                self._add(family, series, sorted(points))

    def efa_node(self, labels: dict[str, str], devices: Sequence[str],
                 counters: dict[str, dict[str, float]] | None = None, rdma_idle: bool = False) -> None:
        """One node's EFA exporter counters, one series per RDMA device and port; ``counters`` maps a device to the
        increase of each counter over the window, spread over its periods (the latest gets the remainder).
        The byte counters grow by 4 GB a period (a job's collectives) unless ``rdma_idle`` (a hung job)."""
        for n, device in enumerate(devices):
            raised = (counters or {}).get(device, {})
            for counter in EFA_FAMILIES:
                total = int(raised.get(counter, 0))
                base, extra = divmod(total, self.periods)
                value = float(1_000_000 * (n + 1)) if counter.endswith("bytes") else 0.0
                points = []
                for k in reversed(range(self.periods)):  # oldest first: a counter only grows
                    times = self._times(k)
                    step = base + (1 if k < extra else 0)
                    busy_bytes = 4.0e9 if counter.endswith("bytes") and not rdma_idle else 0.0
                    for j, when in enumerate(times):
                        if j == len(times) // 2:
                            value += step + busy_bytes  # mid-period, so the period's own samples see it
                        points.append((when, value))
                self._add(f"node_amazonefa_{counter}", {"device": device, "port": "1", **labels}, points)

    def text(self) -> str:
        out = []
        for family, lines in self.samples.items():
            if family.startswith("node_amazonefa_"):
                counter = family.removeprefix("node_amazonefa_")
                out += [f"# HELP {family} {EFA_FAMILIES[counter]}", f"# TYPE {family} unknown"]
            else:
                out += [f"# HELP {family} {DCGM_FAMILIES[family]}", f"# TYPE {family} gauge"]
            out += lines
        return "\n".join([*out, "# EOF"]) + "\n"
