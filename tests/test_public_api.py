"""Every contract name is importable from trio_agent (DESIGN 3 to 7)."""

import trio_agent

CONTRACT = """
TextBlock ToolCall Block UserMessage AssistantMessage ToolResultMessage Message
text_from_assistant validate_transcript repair_transcript TranscriptError
MAX_AGENT_STEPS MAX_INITIAL_MESSAGES MAX_STEP_CHUNKS MAX_STEP_TEXT MAX_ASSISTANT_BLOCKS
MAX_ARGUMENT_DEPTH MAX_ARGUMENT_VALUES MAX_ARGUMENT_ENTRIES MAX_ARGUMENT_CHARS
ModelRequest ToolSpec TextDelta Chunk Usage ModelResponse Model ModelStream
Tool tool ToolRegistry execute_tool_call ToolError FatalToolError
run_agent_loop AgentRun
MessageAccepted ModelChunk ToolStarted ToolFinished RunFinished Event
Completed Cancelled MaxSteps Failed RunResult
""".split()


def test_contract_names_are_exported():
    missing = [name for name in CONTRACT if not hasattr(trio_agent, name)]
    assert missing == []


def test_testing_helpers_are_exported():
    from trio_agent.testing import ScriptedModel, scripted_response

    assert callable(ScriptedModel) and callable(scripted_response)


def test_struct_defaults_are_the_contracts():
    # DESIGN 5 and 6: Usage counts default to 0, a request's system to "", and the
    # registry takes its tools by the keyword ``tools``.
    import msgspec

    from trio_agent import ModelRequest, ToolRegistry, Usage

    assert Usage() == Usage(0, 0, 0, 0)
    assert msgspec.json.decode(b"{}", type=Usage) == Usage()
    assert ModelRequest("request-001", (), ()).system == ""
    registry = ToolRegistry(tools=[])
    assert registry.specs() == () and len(registry) == 0
