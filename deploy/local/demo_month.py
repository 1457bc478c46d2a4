#!/usr/bin/env python3
"""The demo's month: November 2026 for four tenants on two pools.

The simulated collectors (`gpuledger-collector simulate`, settings below)
bring the fleet and the jobs: inventory, admission requests, starts,
completions, failures and their retries, cancellations, GPUs falling off
the bus and coming back. This script writes what the rest of the company
sends the ledger around them, as NDJSON on stdout:

  setup   before the fleet's first tick: two price books (H200 gets cheaper
          on the 16th and idle capacity is then shared out), the nodes'
          inventory (the same events the simulator sends first: the ledger
          learns of the pools, and the capacity reservations are checked
          against), each tenant's quota, burst and budget, and three
          reservations: one
          confirmed, one rejected for double booking, one confirmed later
  close   after the month: storage and egress metered for the month, and a
          Clock per pool at its end
  month   setup, the simulator's ledger events and close, in that order:
          the whole month as one file, for offline recomputation
  sim-args  the simulator's settings, one per line

Usage: demo_month.py PHASE --collector BIN [--cluster NAME]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FLEET = os.path.join(HERE, "..", "sim", "fleet-demo.json")

START = "2026-11-01T00:00:00Z"
END = "2026-12-01T00:00:00Z"
H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"

SIM_ARGS = ["--fleet", FLEET, "--start", START, "--until", END, "--interval-ms", "60000",
            "--seed", "7", "--xid-per-gpu-day", "0.02"]

# tenant → (pool, nominal GE, burst GE, monthly budget, storage GB held, egress GB).
# The simulated schedulers start every job; quota + burst leaves room for
# nearly all of them, so a denial (and the quota violation of a job that
# starts anyway) stays rare.
TENANTS = {
    "team-llm": ("h200", "3", "5", "15000", 2400, 1800),
    "team-research": ("h200", "2", "4", None, 800, 250),
    "team-vision": ("h100", "3", "4", None, 1500, 600),
    "team-search": ("h100", "2", "4", None, 300, 4200),
}

# (id, tenant, GE, start, end): spare on h200 is 8 − 5 = 3 GE. team-llm
# books 2 GE for three days; team-research's 2 GE inside that window would
# need 4 and is rejected; its 1 GE later in the month is confirmed.
RESERVATIONS = [
    ("res-llm-1", "team-llm", 2, "2026-11-10T00:00:00Z", "2026-11-13T00:00:00Z"),
    ("res-research-1", "team-research", 2, "2026-11-11T00:00:00Z", "2026-11-12T00:00:00Z"),
    ("res-research-2", "team-research", 1, "2026-11-20T00:00:00Z", "2026-11-22T00:00:00Z"),
]


class Ledger:
    """Prints events; ids are unique per phase, as a phase is posted on its own."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.phase = "setup"
        self.n = 0

    def add(self, event_type, at, source, **fields):
        self.n += 1
        event = {"type": event_type, "event_id": f"demo-{self.phase}-{self.n:03d}", "event_time": at,
                 "source": source, "cluster": self.cluster}
        event.update({k: v for k, v in fields.items() if v is not None})
        print(json.dumps(event, separators=(",", ":")))


def simulate(collector, cluster, until=END):
    """The simulator's ledger events up to `until`, without Kafka."""
    settings = [until if a == END else a for a in SIM_ARGS]
    with tempfile.NamedTemporaryFile(suffix=".ndjson") as out:
        subprocess.run([collector, "simulate", "--cluster", cluster, *settings,
                        "--dry-run", "--ledger-ndjson", out.name],
                       check=True, stdout=subprocess.DEVNULL)
        return open(out.name).read().splitlines()


def setup(ledger, collector):
    def book(version, effective, h200, idle):
        ledger.add("PriceBook", START, "finance-pricing", version=version, effective_from=effective,
                   currency="USD",
                   rates=[{"model": H100, "reserved_per_gpu_hour": "1.75",
                           "quota_per_gpu_hour": "2.10", "on_demand_per_gpu_hour": "3.50"},
                          {"model": H200, "reserved_per_gpu_hour": h200[0],
                           "quota_per_gpu_hour": h200[1], "on_demand_per_gpu_hour": h200[2]}],
                   storage_per_gb_month="0.08", egress_per_gb="0.05", overhead_pct="8",
                   reservation_charge="window", idle_distribution=idle)

    # Energy is in the GPU-hour rates here (no energy_per_kwh), so the
    # statement can be recomputed from the ledger alone.
    book(1, "2026-10-01T00:00:00Z", ("2.45", "2.80", "4.90"), "central")
    book(2, "2026-11-16T00:00:00Z", ("2.30", "2.60", "4.60"), "proportional")
    # The simulator's first events: the inventory, before any tick. The
    # pools exist from then on.
    for line in simulate(collector, ledger.cluster, until=START):
        print(line)
    for tenant, (pool, nominal, burst, budget, *_usage) in TENANTS.items():
        ledger.add("TenantPolicy", START, "gpuledger-admin", pool=pool, tenant=tenant,
                   nominal_ge=nominal, burst_ge=burst, monthly_budget=budget, enforcement="deny")
    for rid, tenant, ge, start, end in RESERVATIONS:
        ledger.add("ReservationRequest", START, "gpuledger-admin", pool="h200", reservation_id=rid,
                   tenant=tenant, slices=ge, max_slices=1, start=start, end=end)


def close(ledger):
    ledger.phase = "close"
    for tenant, (pool, *_policy, storage_gb, egress_gb) in TENANTS.items():
        ledger.add("UsageRecord", END, "storage-exporter", pool=pool, tenant=tenant,
                   kind="storage_gb_hours", quantity=str(storage_gb * 720), start=START, end=END)
        ledger.add("UsageRecord", END, "network-exporter", pool=pool, tenant=tenant,
                   kind="egress_bytes", quantity=str(egress_gb * 1_000_000_000), start=START, end=END)
    for pool in ("h100", "h200"):
        ledger.add("Clock", END, "gpuledger-demo", pool=pool, now=END)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("phase", choices=["setup", "close", "month", "sim-args"])
    parser.add_argument("--collector", help="the gpuledger-collector binary (setup, month)")
    parser.add_argument("--cluster", default="demo")
    args = parser.parse_args()
    if args.phase == "sim-args":
        print("\n".join(SIM_ARGS))
        return
    if args.phase in ("setup", "month") and not args.collector:
        sys.exit(f"{args.phase} needs --collector")
    ledger = Ledger(args.cluster)
    if args.phase in ("setup", "month"):
        setup(ledger, args.collector)
    if args.phase == "month":
        for line in simulate(args.collector, args.cluster):
            print(line)
    if args.phase in ("close", "month"):
        close(ledger)


if __name__ == "__main__":
    main()
