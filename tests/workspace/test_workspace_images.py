"""The workspace's ``read_image`` (issue 15): a confined, size-bounded read of an
image file into an ``ImageBlock``, known by its bytes, not its name."""

from __future__ import annotations

import os

import pytest
import trio

from trio_agent import ImageBlock, TextBlock, ToolCall, execute_tool_call
from trio_agent.workspace import Workspace, WorkspaceError

pytestmark = pytest.mark.usefixtures("sandbox_mode")  # each test in both modes


PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
SIGNATURES = {
    "image/png": PNG,
    "image/jpeg": b"\xff\xd8\xff\xe0" + b"\x00" * 32,
    "image/gif": b"GIF89a" + b"\x00" * 32,
    "image/webp": b"RIFF\x20\x00\x00\x00WEBPVP8 " + b"\x00" * 32,
}


@pytest.mark.parametrize(("media_type", "data"), sorted(SIGNATURES.items()))
async def test_an_image_is_read_whole_and_typed_by_its_bytes(tmp_path, media_type, data):
    (tmp_path / "picture.bin").write_bytes(data)  # the name says nothing
    block = await Workspace(tmp_path).read_image("picture.bin")
    assert block == ImageBlock(media_type, data=data)


async def test_a_file_that_is_not_an_image_is_refused(tmp_path):
    (tmp_path / "fake.png").write_text("not a picture")
    with pytest.raises(WorkspaceError, match="is not a PNG, JPEG, GIF or WebP image"):
        await Workspace(tmp_path).read_image("fake.png")


async def test_an_image_over_the_limit_is_refused_before_it_is_read(tmp_path):
    (tmp_path / "big.png").write_bytes(PNG + b"\x00" * 1000)
    workspace = Workspace(tmp_path, max_image_bytes=500)
    with pytest.raises(WorkspaceError, match="more than max_image_bytes \\(500\\)"):
        await workspace.read_image("big.png")


def test_the_image_limit_is_checked_against_max_media_bytes(tmp_path):
    with pytest.raises(ValueError, match="max_image_bytes must be an int in"):
        Workspace(tmp_path, max_image_bytes=21 * 1024 * 1024)


async def test_paths_stay_inside_the_workspace(tmp_path):
    outside = tmp_path / "outside.png"
    outside.write_bytes(PNG)
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside, root / "link.png")
    workspace = Workspace(root)
    for path in ("../outside.png", str(outside), "link.png"):
        with pytest.raises(WorkspaceError):
            await workspace.read_image(path)


async def test_the_tool_returns_a_caption_and_the_image(tmp_path):
    (tmp_path / "chart.png").write_bytes(PNG)
    tools = Workspace(tmp_path).tools()
    result = await execute_tool_call(tools, ToolCall("c1", "read_image", {"path": "chart.png"}))
    assert not result.is_error
    assert result.content == (
        TextBlock(f"chart.png: image/png, {len(PNG)} bytes"),
        ImageBlock("image/png", data=PNG),
    )
    missing = await execute_tool_call(tools, ToolCall("c2", "read_image", {"path": "nope.png"}))
    assert missing.is_error and "nope.png" in missing.content


async def test_cancellation_stops_the_read(tmp_path):
    (tmp_path / "a.png").write_bytes(PNG)
    with trio.move_on_after(0) as scope:
        await Workspace(tmp_path).read_image("a.png")
    assert scope.cancelled_caught
