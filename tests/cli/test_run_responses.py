"""`trio-agent run --provider openai-responses`, a real subprocess against the
loopback server answering with recorded Responses streams."""

from __future__ import annotations

from cli_runner import BASE_ENV, ENV, TRIO_AGENT, cli
from loopback import Reply
from paths import WIRE

from trio_agent.ledger import derive
from trio_agent.stores import parse_jsonl


def wire(name: str) -> bytes:
    return (WIRE / name).read_bytes()


def run_args(loopback, workspace, *extra: str) -> list[str]:
    return [
        *TRIO_AGENT,
        "run",
        "--provider",
        "openai-responses",
        "--model",
        "gpt-5",
        "--workspace",
        str(workspace),
        "--base-url",
        f"{loopback.url}/v1",
        *extra,
    ]


async def test_run_and_resume_speak_the_responses_api(loopback, tmp_path):
    ledger = tmp_path / "s.jsonl"
    loopback.replies += [
        Reply(body=wire("responses_reasoning_encrypted_function_call.sse"), piece=500),
        Reply(body=wire("responses_text.sse")),
    ]
    done = await cli(
        run_args(loopback, tmp_path, "--max-tokens", "321", "--ledger", str(ledger), "hello")
    )
    # final_result is no workspace tool: the model gets an error result, then answers
    assert done.returncode == 0, done.stderr
    assert b"The capital of France is Paris." in done.stdout
    first, second = (seen.json() for seen in loopback.requests)
    assert [seen.path for seen in loopback.requests] == ["/v1/responses"] * 2
    assert loopback.requests[0].headers["authorization"] == "Bearer sk-test-cli"
    assert first["model"] == "gpt-5" and first["max_output_tokens"] == 321
    assert first["store"] is False and "max_completion_tokens" not in first
    assert {t["name"] for t in first["tools"]} >= {"read_file", "write_file"}
    assert [item.get("type") for item in second["input"]] == [
        None,  # the user's message
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert second["input"][1]["encrypted_content"].startswith("gAAAAABoyXvx")  # from .done

    config = derive(parse_jsonl(ledger.stem, ledger.read_bytes()).records).metadata["cli"]
    assert config["provider"] == "openai-responses" and config["max_tokens"] == 321
    assert config["base_url"] == f"{loopback.url}/v1"

    # resume keeps the recorded provider, server and max tokens
    loopback.replies.append(Reply(body=wire("responses_text.sse")))
    resumed = await cli([*TRIO_AGENT, "resume", str(ledger), "--message", "again"])
    assert resumed.returncode == 0, resumed.stderr
    third = loopback.requests[2]
    assert third.path == "/v1/responses" and third.json()["max_output_tokens"] == 321
    assert third.json()["input"][1]["type"] == "reasoning"  # the transcript, sent back

    shown = await cli([*TRIO_AGENT, "show", str(ledger)])
    assert shown.returncode == 0 and b"openai-responses" in shown.stdout


async def test_the_key_variable_is_openai_api_key(loopback, tmp_path):
    missing = await cli(run_args(loopback, tmp_path, "x"), env=BASE_ENV)
    assert missing.returncode == 2
    assert "no API key: set OPENAI_API_KEY or pass --api-key-env NAME" in missing.stderr.decode()
    assert loopback.requests == []
    loopback.replies.append(Reply(body=wire("responses_text.sse")))
    done = await cli(run_args(loopback, tmp_path, "x"), env=ENV)
    assert done.returncode == 0, done.stderr
    assert "max_output_tokens" not in loopback.requests[0].json()  # the server's own
