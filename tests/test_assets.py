"""model-assets.json: write, check, and the one-line refusals (no model package needed)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pytest_s2st import assets
from pytest_s2st.errors import S2STError


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    (d / "speech_tokenizer").mkdir(parents=True)
    (d / "config.json").write_text('{"model_type": "x"}\n')
    (d / "model.safetensors").write_bytes(bytes(range(256)) * 40)
    (d / "speech_tokenizer" / "model.safetensors").write_bytes(b"\x01" * 1000)
    (d / "README.md").write_text("not loaded\n")
    return d


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_sha256_file_matches_hashlib(tmp_path):
    f = tmp_path / "big.bin"
    data = bytes(range(256)) * 9000  # > one 1 MiB read block
    f.write_bytes(data)
    assert assets.sha256_file(f) == hashlib.sha256(data).hexdigest()


def test_write_manifest_lists_every_file_with_size_and_sha(model_dir):
    out = assets.write_manifest(model_dir)
    assert out == model_dir / "model-assets.json"
    data = json.loads(out.read_text())
    assert sorted(data) == ["README.md", "config.json", "model.safetensors", "speech_tokenizer/model.safetensors"]
    for rel, entry in data.items():
        raw = (model_dir / rel).read_bytes()
        assert entry == {"size": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
    # rewriting is byte-identical (sorted keys), and the manifest never lists itself
    first = out.read_bytes()
    assets.write_manifest(model_dir)
    assert out.read_bytes() == first
    assert "model-assets.json" not in json.loads(first)


def test_check_manifest_returns_hashes(model_dir):
    assets.write_manifest(model_dir)
    got = assets.check_manifest(model_dir)
    assert got["model.safetensors"] == assets.sha256_file(model_dir / "model.safetensors")
    assert len(got) == 4


def test_one_flipped_byte_is_refused_naming_the_file(model_dir):
    assets.write_manifest(model_dir)
    _flip_byte(model_dir / "speech_tokenizer" / "model.safetensors", 500)  # same size, other content
    with pytest.raises(S2STError) as e:
        assets.check_manifest(model_dir)
    msg = str(e.value)
    assert "\n" not in msg
    assert str(model_dir / "speech_tokenizer" / "model.safetensors") in msg
    assert "SHA256" in msg


def test_size_change_is_refused(model_dir):
    assets.write_manifest(model_dir)
    with open(model_dir / "config.json", "a") as f:
        f.write(" ")
    with pytest.raises(S2STError, match=r"config\.json: size 21 differs from 20"):
        assets.check_manifest(model_dir)


def test_missing_file_is_refused(model_dir):
    assets.write_manifest(model_dir)
    (model_dir / "model.safetensors").unlink()
    with pytest.raises(S2STError, match=r"model\.safetensors: listed in .*model-assets\.json but missing"):
        assets.check_manifest(model_dir)


def test_unlisted_loadable_file_is_refused_other_extras_are_not(model_dir):
    assets.write_manifest(model_dir)
    (model_dir / "notes.md").write_text("x")  # not something a loader reads
    (model_dir / ".gitattributes").write_text("x")  # hidden
    (model_dir / ".cache").mkdir()
    (model_dir / ".cache" / "x.json").write_text("{}")  # inside a hidden folder
    assets.check_manifest(model_dir)
    (model_dir / "model-00002-of-00002.safetensors").write_bytes(b"\0")  # an extra weight shard
    with pytest.raises(S2STError, match=r"model-00002-of-00002\.safetensors: not listed in"):
        assets.check_manifest(model_dir)


def test_check_against_another_manifest_or_a_mapping(model_dir, tmp_path):
    assets.write_manifest(model_dir)
    frozen = tmp_path / "frozen.json"
    frozen.write_text((model_dir / "model-assets.json").read_text())
    (model_dir / "model-assets.json").unlink()
    assert len(assets.check_manifest(model_dir, frozen)) == 4
    mapping = json.loads(frozen.read_text())
    mapping["config.json"]["sha256"] = "0" * 64
    with pytest.raises(S2STError, match=r"config\.json: SHA256 .* in the given manifest"):
        assets.check_manifest(model_dir, mapping)


@pytest.mark.parametrize(
    "content, match",
    [
        (None, "asset manifest not found"),
        ("{not json", "cannot read asset manifest"),
        ("{}", "non-empty mapping"),
        ('{"a.bin": {"size": "1", "sha256": "x"}}', r"entry 'a\.bin' must be"),
        ('{"../up.bin": {"size": 1, "sha256": "' + "0" * 64 + '"}}', "must be a path inside the model directory"),
    ],
)
def test_bad_manifest_is_one_line(model_dir, content, match):
    if content is not None:
        (model_dir / "model-assets.json").write_text(content)
    with pytest.raises(S2STError, match=match) as e:
        assets.check_manifest(model_dir)
    assert "\n" not in str(e.value)
    assert str(model_dir / "model-assets.json") in str(e.value)


def test_missing_model_dir(tmp_path):
    with pytest.raises(S2STError, match="model directory does not exist"):
        assets.check_manifest(tmp_path / "nowhere")


def test_cli_write_then_check(model_dir, capsys):
    assert assets.main(["write", str(model_dir)]) == 0
    assert assets.main(["check", str(model_dir)]) == 0
    assert "4 files match" in capsys.readouterr().out
    _flip_byte(model_dir / "model.safetensors", 0)
    assert assets.main(["check", str(model_dir)]) == 1
    assert "model.safetensors: SHA256" in capsys.readouterr().err
    assert assets.main(["bogus"]) == 2
