"""Answers with the database's time and version, read with the connection
URL from the DATABASE_URL variable. The connection is opened once per
instance and reused by the invocations it serves."""

import os

import psycopg

_conn = None


def _connection():
    global _conn
    if _conn is None or _conn.closed:
        _conn = psycopg.connect(
            os.environ["DATABASE_URL"],
            autocommit=True,
            options=f"-c statement_timeout={os.environ.get('STATEMENT_TIMEOUT_MS', '2000')}",
        )
    return _conn


def handle(event, context):
    with _connection().cursor() as cur:
        cur.execute("select now()::text, version()")
        now, version = cur.fetchone()
    return {"now": now, "version": version}
