"""python -m pytest_s2st.tiny.folder: the folder alone on stdout (make bench-full reads it with $(...))."""
from __future__ import annotations

from pathlib import Path

from pytest_s2st.errors import S2STError
from pytest_s2st.tiny import folder


def test_stdout_is_the_folder_alone_whatever_the_build_prints(monkeypatch, capsys, tmp_path):
    def noisy_build() -> Path:
        print("********\nWarning: flash-attn is not installed.\n********")  # what qwen-tts prints on import
        return tmp_path / "built"

    monkeypatch.setitem(folder.BUILDS, "qwen3tts-full", noisy_build)
    assert folder.main(["qwen3tts-full"]) == 0
    out = capsys.readouterr()
    assert out.out == f"{tmp_path / 'built'}\n"  # was: the banner and the folder, read as one path
    assert "flash-attn" in out.err


def test_a_failed_build_or_an_unknown_name_prints_no_folder(monkeypatch, capsys):
    def failing() -> Path:
        raise S2STError("cannot build: No space left on device")

    monkeypatch.setitem(folder.BUILDS, "fairseq-full", failing)
    assert folder.main(["fairseq-full"]) == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err == "pytest_s2st.tiny.folder: error: cannot build: No space left on device\n"
    assert folder.main(["tiny"]) == 2
    assert capsys.readouterr().out == ""
