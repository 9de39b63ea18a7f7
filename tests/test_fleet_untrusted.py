"""The fleet tools against what anyone who can write to Redis may leave there, and against
being stopped half-way: ``scrapy redis`` run as users run it (a ``scrapy`` process in a
project, see tests/test_commands.py), the dashboard's HTTP endpoints (a real dashboard,
see tests/dashboard_process.py), on a real redis-server."""

from __future__ import annotations

import json
import os

import pytest
from scrapy import Request

from test_commands import LEAN, leave, schedule, write_project

pytestmark = pytest.mark.timeout(180)


# -- purge, stopped half-way ---------------------------------------------------------------


DYING_CLIENT = """
import os
import signal

import redis


class DyingRedis(redis.Redis):
    \"\"\"A client whose process is killed (SIGKILL, as kill -9) when it is about to send
    its UNLINK number DIE_AT_UNLINK: stopped right after the ones before.\"\"\"

    unlinks = 0

    def execute_command(self, *args, **options):
        if str(args[0]).upper() == "UNLINK":
            DyingRedis.unlinks += 1
            if DyingRedis.unlinks == int(os.environ["DIE_AT_UNLINK"]):
                os.kill(os.getpid(), signal.SIGKILL)
        return super().execute_command(*args, **options)
"""

DYING_SETTINGS = """
if os.environ.get("DIE_AT_UNLINK"):
    REDIS_PARAMS = {"redis_cls": "proj.dying.DyingRedis"}
"""


@pytest.mark.parametrize("die_at", [2, 4])
def test_a_purge_killed_after_an_unlink_batch_deletes_everything_when_run_again(
    tmp_path, redis_url, server, schedulers, settings_dict, die_at
):
    settings = {**settings_dict, "DUPEFILTER_CLASS": LEAN, "SCHEDULER_SHARDS": "2"}
    requests = [Request(f"http://a.test/{n}") for n in range(3000)]
    leave(schedule(schedulers, settings, requests))
    assert len(server.keys("*:lean:*")) > 2000  # several UNLINK batches of 500
    project = write_project(tmp_path, redis_url)
    (project.path / "proj" / "dying.py").write_text(DYING_CLIENT)
    with open(project.path / "proj" / "settings.py", "a") as settings_file:
        settings_file.write(DYING_SETTINGS)
    purge = ["redis", "purge", "demo", "--all", "--yes", "-s", f"DUPEFILTER_CLASS={LEAN}"]
    os.environ["DIE_AT_UNLINK"] = str(die_at)
    try:
        killed = project.scrapy(*purge)
    finally:
        del os.environ["DIE_AT_UNLINK"]
    assert killed.returncode == -9, killed.stderr
    assert server.keys("*:lean:*")  # stopped half-way

    again = project.scrapy(*purge)

    assert again.returncode == 0, again.stderr
    assert server.keys() == []
