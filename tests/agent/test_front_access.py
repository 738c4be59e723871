"""The front's access log: rotated within its bound, read back summed, damaged lines passed over."""

from __future__ import annotations

import calendar
import json
import os
from pathlib import Path

import pytest

from llmgw_agent.front import access
from llmgw_agent.front.access import AccessLog, Exchange, request_id


def _exchange(key: str, model: str, status: int, tokens: tuple[int, int] | None) -> Exchange:
    done = Exchange("r", key)
    done.model, done.status, done.tokens = model, status, tokens
    return done


def test_the_log_rotates_and_keeps_its_last_files_only(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(access, "ROTATE_BYTES", 1000)
    log = AccessLog(str(tmp_path))
    for _ in range(100):
        log.write(_exchange("team", "m", 200, (3, 4)))
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["access.log", "access.log.1", "access.log.2", "access.log.3"]
    assert all(os.stat(tmp_path / n).st_size <= 1000 for n in names)
    assert all(os.stat(tmp_path / n).st_mode & 0o777 == 0o600 for n in names)
    kept = sum(len((tmp_path / n).read_text().splitlines()) for n in names)
    (summed,) = log.usage()
    assert summed["requests"] == 100  # every line written counts, rotated out or not
    again = AccessLog(str(tmp_path))
    again.load()  # a front started again: the kept files
    (summed,) = again.usage()
    assert summed["requests"] == kept < 100
    assert (summed["prompt_tokens"], summed["completion_tokens"]) == (3 * kept, 4 * kept)


def test_usage_is_summed_per_utc_day_key_and_model_and_damaged_lines_pass(tmp_path: Path):
    log = AccessLog(str(tmp_path))
    late = _exchange("team", "sql", 200, (5, 6))
    late.at = calendar.timegm((2026, 12, 5, 23, 59, 59))
    log.write(late)
    log.write(_exchange("team", "sql", 429, None))
    log.write(_exchange("ops", "", 503, None))
    log.close()
    with open(tmp_path / "access.log", "ab") as damaged:
        damaged.write(b'{"at": "soon", "key": 1}\n\xff\xfe\n[1]\n{"at": 1e999, "key": "x"}\n{"at"')
    log = AccessLog(str(tmp_path))
    log.load()
    days = log.usage()
    assert [(d["day"][:7], d["key"], d["model"], d["requests"], d["answered"]) for d in days] == [
        ("2026-12", "team", "sql", 1, 1),
        (days[1]["day"][:7], "ops", "", 1, 0),
        (days[2]["day"][:7], "team", "sql", 1, 0),
    ]
    assert days[0]["day"] == "2026-12-05" and days[0]["prompt_tokens"] == 5


def test_a_log_that_cannot_be_written_loses_lines_not_answers(tmp_path: Path):
    folder = tmp_path / "gone"
    folder.mkdir()
    log = AccessLog(str(folder))
    folder.rmdir()
    log.write(_exchange("team", "m", 200, None))  # no raise, and the sums still count it
    assert [d["requests"] for d in log.usage()] == [1] and AccessLog(None).usage() == []


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("req-1", True),
        ("a" * 128, True),
        ("a" * 129, False),
        ("a b", False),
        ("é", False),
        ("x\r\nSet-Cookie: y", False),
        ("", False),
        ("00-abc:def/ghi+jk=", True),
    ],
)
def test_a_clients_request_id_is_kept_only_when_it_is_a_plain_token(given: str, kept: bool):
    made = request_id(given)
    assert (made == given) is kept
    if not kept:
        assert len(made) == 32 and int(made, 16) >= 0


def test_a_line_holds_what_an_operator_reads_and_nothing_of_the_request(tmp_path: Path):
    log = AccessLog(str(tmp_path))
    log.write(_exchange("team", "m", 200, (1, 2)))
    log.close()
    (line,) = [json.loads(x) for x in (tmp_path / "access.log").read_text().splitlines()]
    assert sorted(line) == sorted(
        [
            "at",
            "id",
            "key",
            "model",
            "worker",
            "status",
            "prompt_tokens",
            "completion_tokens",
            "ttft_s",
            "duration_s",
            "queued_s",
        ]
    )
