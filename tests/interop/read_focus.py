"""Reads a FOCUS export (Parquet) with pyarrow, as a FinOps tool would.

Usage: read_focus.py FILE.parquet

Prints one JSON object: "types" (column name -> pyarrow type, in file
order), "rows", "billed_by_subaccount" (SubAccountId -> sum of BilledCost
as a decimal string), "categories" (the ChargeCategory values), and
"consumed_outside_usage" (rows with a ConsumedQuantity whose category is
not Usage, which FOCUS forbids).
"""

import json
import sys
from decimal import Decimal

import pyarrow.parquet as pq


def main():
    table = pq.read_table(sys.argv[1])
    rows = table.to_pylist()
    billed = {}
    for row in rows:
        account = row["SubAccountId"]
        billed[account] = billed.get(account, Decimal(0)) + row["BilledCost"]
    print(json.dumps({
        "types": {field.name: str(field.type) for field in table.schema},
        "rows": len(rows),
        "billed_by_subaccount": {k: str(v) for k, v in sorted(billed.items())},
        "categories": sorted({row["ChargeCategory"] for row in rows}),
        "consumed_outside_usage": sum(
            1 for row in rows
            if row["ConsumedQuantity"] is not None and row["ChargeCategory"] != "Usage"
        ),
        "lines": sorted({row["x_StatementLine"] for row in rows}),
    }))


if __name__ == "__main__":
    main()
