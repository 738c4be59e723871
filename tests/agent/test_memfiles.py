"""A shard's PEM secrets reach its command as in-memory files, never as files on disk or argv."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import pytest

from llmgw_agent.shards import memfiles
from llmgw_core.engines import identity

CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nsecret-planted-7c1\n-----END PRIVATE KEY-----\n"
SECRETS = {identity.CERT_VARIABLE: CERT, identity.KEY_VARIABLE: KEY}


def test_the_agent_knows_the_consoles_names_for_the_variables_and_placeholders():
    assert memfiles.PEM_FILES == (
        (identity.CERT_VARIABLE, identity.CERT_PLACEHOLDER),
        (identity.KEY_VARIABLE, identity.KEY_PLACEHOLDER),
    )


def test_each_placeholder_becomes_a_dev_fd_path_of_a_memory_file_holding_its_pem():
    argv = ["engine", "--cert", identity.CERT_PLACEHOLDER, f"--key={identity.KEY_PLACEHOLDER}"]
    held = memfiles.hold(argv, {"PATH": "/bin", **SECRETS})
    try:
        cert_path, key_arg = held.argv[2], held.argv[3]
        assert cert_path.startswith("/dev/fd/") and key_arg.startswith("--key=/dev/fd/")
        key_path = key_arg.removeprefix("--key=")
        with open(cert_path) as cert, open(key_path) as key:
            assert (cert.read(), key.read()) == (CERT, KEY)
        assert held.env == {"PATH": "/bin"}
        assert len(held.fds) == 2
        for fd in held.fds:
            assert os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:llmgw-")
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            assert seals & fcntl.F_SEAL_WRITE  # not even the engine may rewrite its key
            with pytest.raises(PermissionError):
                os.write(fd, b"x")
    finally:
        held.close()


def test_a_child_started_with_the_descriptors_reads_its_key_and_its_environment_has_none():
    argv = [sys.executable, "-c", "import os, sys; print(open(sys.argv[1]).read(), end='')"]
    held = memfiles.hold([*argv, identity.KEY_PLACEHOLDER], {**os.environ, **SECRETS})
    try:
        child = subprocess.run(
            held.argv, env=held.env, pass_fds=held.fds, capture_output=True, text=True, check=True
        )
    finally:
        held.close()
    assert child.stdout == KEY
    assert identity.KEY_VARIABLE not in held.env and identity.CERT_VARIABLE not in held.env


def test_a_command_that_asks_for_no_file_gets_none_and_loses_the_variables_all_the_same():
    held = memfiles.hold(["ray", "start", "--head"], {"HOME": "/h", **SECRETS})
    assert (held.argv, held.env, held.fds) == (["ray", "start", "--head"], {"HOME": "/h"}, ())


def test_a_placeholder_whose_pem_was_not_sent_is_refused_with_its_name():
    with pytest.raises(memfiles.MemfileError, match="sent no LLMGW_ENGINE_TLS_KEY"):
        memfiles.hold(["engine", identity.KEY_PLACEHOLDER], {identity.CERT_VARIABLE: CERT})


def test_without_memfd_create_a_shard_carrying_a_key_is_refused_in_one_sentence(
    monkeypatch: pytest.MonkeyPatch,
):
    assert memfiles.refusal(SECRETS) is None
    monkeypatch.delattr(os, "memfd_create")
    assert memfiles.refusal({"HF_TOKEN": "t"}) is None  # nothing to hold in memory
    sentence = memfiles.refusal(SECRETS)
    assert sentence == memfiles.NO_MEMFD and "never written to its disk" in sentence
    with pytest.raises(memfiles.MemfileError, match="no memfd_create"):
        memfiles.hold(["engine", identity.CERT_PLACEHOLDER], SECRETS)
