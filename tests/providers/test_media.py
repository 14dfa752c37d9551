"""Media encoded for the wire (issue 15): standard base64 and ``data:`` URLs,
each image encoded once however many steps send it again, within a bound."""

from __future__ import annotations

import base64
import gc

from trio_agent import DocumentBlock, ImageBlock
from trio_agent.providers._media import _Encodings, base64_of, data_url


def test_base64_and_data_urls_are_the_standard_forms():
    data = bytes(range(256)) * 3
    image = ImageBlock("image/png", data=data)
    assert base64_of(image) == base64.b64encode(data).decode()
    assert data_url(image) == "data:image/png;base64," + base64.b64encode(data).decode()
    assert data_url(ImageBlock("image/png", url="https://x.io/a.png")) == "https://x.io/a.png"
    pdf = DocumentBlock("application/pdf", data=data)
    assert data_url(pdf).startswith("data:application/pdf;base64,AAECAw")


def test_an_image_sent_again_is_not_encoded_again():
    image = ImageBlock("image/png", data=b"\x89PNG" * 1000)
    assert data_url(image) is data_url(image)
    assert base64_of(image) is base64_of(image)


def test_when_full_the_kept_encodings_stay_and_new_ones_are_not_kept():
    # The second review found least-recently-used dropping miss every time for a
    # transcript of more images than fit, sent in the same order every step.
    cache = _Encodings(limit=100)
    blocks = [ImageBlock("image/png", data=bytes([i]) * 30) for i in range(3)]  # 40 chars each
    texts = [cache.get(block, "") for block in blocks]
    assert texts[0] == base64.b64encode(blocks[0].data).decode()
    for _ in range(3):  # step after step, in the same order
        assert cache.get(blocks[0], "") is texts[0] and cache.get(blocks[1], "") is texts[1]
        assert cache.get(blocks[2], "") is not texts[2]  # never kept: encoded anew, equal
        assert cache.get(blocks[2], "") == texts[2]
    assert cache._size == sum(len(text) for _, _, text in cache._entries.values()) == 80
    huge = ImageBlock("image/png", data=b"x" * 300)  # bigger than the bound: never kept
    assert cache.get(huge, "p:") == "p:" + base64.b64encode(huge.data).decode()
    assert id(huge) not in cache._entries


def test_the_cache_is_safe_for_runs_in_several_threads():
    # The second review found KeyError and "dictionary changed size during
    # iteration" out of encode_request with runs in two threads.
    import sys
    import threading

    cache = _Encodings(limit=2000)
    errors: list[BaseException] = []

    def hammer(seed: int) -> None:
        alive: list[ImageBlock] = []  # the cache fills up; blocks die now and then
        try:
            for i in range(400):
                block = ImageBlock("image/png", data=bytes([seed, i % 256]) * 50)
                assert cache.get(block, "") == base64.b64encode(block.data).decode()
                alive.append(block)
                if len(alive) > 20:
                    alive.pop(i % 7)  # its entry goes, maybe while another thread adds one
            alive.clear()
        except Exception as exc:  # reported below, in the test's thread
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=hammer, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    gc.collect()
    assert cache._entries == {} and cache._size == 0


def test_an_encoding_goes_when_its_block_goes():
    cache = _Encodings(limit=1000)
    block = ImageBlock("image/png", data=b"\x89PNG" * 10)
    cache.get(block, "")
    assert cache._size > 0
    del block
    gc.collect()
    assert cache._entries == {} and cache._size == 0


def test_a_message_full_of_media_fits_the_shared_cache():
    from trio_agent.limits import MAX_MESSAGE_MEDIA_BYTES
    from trio_agent.providers._media import _ENCODINGS

    assert _ENCODINGS.limit >= MAX_MESSAGE_MEDIA_BYTES * 4 // 3 + 1024
