"""Runs SQL over the PostgreSQL wire protocol with psycopg, as a driver
would (the extended protocol, parameters bound by the server).

Usage: pg_client.py HOST PORT PASSWORD [CONNINFO] < queries.json

CONNINFO adds libpq settings to the connection (`sslmode=verify-full
sslrootcert=ca.pem require_auth=scram-sha-256`).

queries.json is a list of {"sql": ..., "params": [...], "protocol": ...}
(params and protocol optional). A query without parameters goes by the
simple query protocol, unless "protocol" is "extended"; one with
parameters always by the extended one.
Prints one JSON list: for each query either {"columns": [...], "types":
[...], "rows": [[...], ...]} with every value as text (None as null), or
{"error": message, "sqlstate": code}. A refused login prints
{"login_error": message} alone.
"""

import json
import sys

import psycopg


def as_text(value):
    if value is None:
        return None
    if isinstance(value, list):
        return [as_text(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def main():
    host, port, password = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    conninfo = sys.argv[4] if len(sys.argv) > 4 else ""
    queries = json.load(sys.stdin)
    try:
        conn = psycopg.connect(
            conninfo, host=host, port=port, user="reader", password=password,
            dbname="gpuledger", autocommit=True, connect_timeout=10,
        )
    except psycopg.OperationalError as e:
        print(json.dumps({"login_error": str(e)}))
        return
    answers = []
    with conn:
        for query in queries:
            try:
                with conn.cursor() as cur:
                    params = query.get("params")
                    sql = query["sql"]
                    if params is None and query.get("protocol") == "extended":
                        # Parameters, none of them, for the extended
                        # protocol; a literal % is then written %%.
                        params = ()
                        sql = sql.replace("%", "%%")
                    cur.execute(sql, params)
                    columns = [d.name for d in cur.description or []]
                    types = [d.type_code for d in cur.description or []]
                    rows = [[as_text(v) for v in row] for row in cur.fetchall()] if cur.description else []
                answers.append({"columns": columns, "types": types, "rows": rows})
            except psycopg.Error as e:
                answers.append({"error": str(e).strip(), "sqlstate": e.sqlstate})
    print(json.dumps(answers))


if __name__ == "__main__":
    main()
