"""Why a start failed, said from the shards' last engine lines."""

from __future__ import annotations

from llmgw_core.serve.start import port_taken

UVICORN_BIND_ERROR = (
    "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
    "address already in use"
)


def test_a_shard_whose_port_was_taken_is_named_in_the_reason():
    lines = {
        "r0 h100-a-01": ["INFO:     Started server process [4242]", UVICORN_BIND_ERROR],
        "r1 h100-a-02": ["INFO 11-29 09:00:01 worker started"],
    }
    assert port_taken(lines) == (
        "r0 h100-a-01 could not bind its port (address already in use): "
        "something else listens on it there"
    )


def test_llama_servers_own_bind_error_names_the_shard_too():
    line = (
        "0.00.005.277 E srv         start: couldn't bind HTTP server socket, "
        "hostname: 127.0.0.1, port: 49495"
    )
    assert port_taken({"r0 cpu-01": [line, "exiting due to HTTP server error"]}) == (
        "r0 cpu-01 could not bind its port (address already in use): "
        "something else listens on it there"
    )


def test_lines_without_a_bind_error_add_nothing_to_the_reason():
    assert port_taken({"r0 cpu-01": ["llama_model_load: error loading model"]}) is None
