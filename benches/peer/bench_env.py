"""What a peer run creates and removes: a fresh PostgreSQL database (dropped after) and the
fake model as a child process (stopped after). Each failure says what to check.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
HERE = Path(__file__).resolve().parent
# How long the fake model may take to start listening (a loaded 2-core machine imports
# aiohttp slowly, but never this slowly).
MODEL_START_TIMEOUT_S = 30.0


class SetupError(Exception):
    """Something the run needs is missing; the message says what to do."""


async def _admin(admin_url: str) -> psycopg.AsyncConnection:
    try:
        return await psycopg.AsyncConnection.connect(admin_url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as err:
        where = conninfo_to_dict(admin_url)
        raise SetupError(
            f"cannot reach PostgreSQL at {where.get('host', '?')}:{where.get('port', '5432')} "
            f"as {where.get('user', '?')} (is it running? set --admin-url or PEER_ADMIN_URL): "
            f"{str(err).strip()}"
        ) from err


async def create_database(admin_url: str) -> tuple[str, str]:
    """Creates `langgraph_peer_<random>`; returns its name and its connection string."""
    name = f"langgraph_peer_{uuid.uuid4().hex[:12]}"
    conn = await _admin(admin_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return name, make_conninfo(admin_url, dbname=name)


async def drop_database(admin_url: str, name: str) -> None:
    """Drops the run's database (best effort: a failure is printed)."""
    try:
        conn = await _admin(admin_url)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()
    except (SetupError, psycopg.Error) as err:
        print(f"[peer] could not drop the database {name}: {err}", file=sys.stderr)


class FakeModel:
    """fake_model.py as a child process on a free loopback port."""

    def __init__(self, process: asyncio.subprocess.Process, port: int) -> None:
        self.process = process
        self.port = port

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @classmethod
    async def start(cls, steps: int, latency_ms: float) -> FakeModel:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(HERE / "fake_model.py"),
            "--steps",
            str(steps),
            "--latency-ms",
            str(latency_ms),
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            line = await asyncio.wait_for(process.stdout.readline(), MODEL_START_TIMEOUT_S)
        except asyncio.TimeoutError:
            line = b""
        text = line.decode(errors="replace").split()
        if len(text) != 2 or text[0] != "PORT":
            process.kill()
            await process.wait()
            raise SetupError(f"the fake model did not start (it said {line!r}; see its stderr)")
        return cls(process, int(text[1]))

    async def stats(self) -> dict:
        """`{"answered": n, "unreadable": n}` from GET /stats."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            await writer.drain()
            response = await reader.read()
        finally:
            writer.close()
        return json.loads(response.split(b"\r\n\r\n", 1)[1])

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except asyncio.TimeoutError:
                self.process.kill()
                await self.process.wait()
