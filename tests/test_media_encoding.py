"""Media encoded for the wire (issue 15): standard base64 and ``data:`` URLs,
each image encoded once however many steps send it again, within a bound."""

from __future__ import annotations

import base64

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


def test_the_kept_encodings_stay_within_their_bound_oldest_dropped_first():
    cache = _Encodings(limit=100)
    blobs = [bytes([i]) * 30 for i in range(5)]  # 40 characters of base64 each
    texts = [cache.get(blob, "") for blob in blobs]
    assert texts[0] == base64.b64encode(blobs[0]).decode()
    assert cache.get(blobs[4], "") is texts[4] and cache.get(blobs[3], "") is texts[3]
    assert cache.get(blobs[0], "") is not texts[0]  # dropped: encoded anew, equal
    assert cache.get(blobs[0], "") == texts[0]
    assert sum(len(text) for _, text in cache._entries.values()) <= 100
    huge = b"x" * 300  # bigger than the bound: encoded, never kept
    assert cache.get(huge, "p:") == "p:" + base64.b64encode(huge).decode()
    assert all(data is not huge for data, _ in cache._entries.values())
