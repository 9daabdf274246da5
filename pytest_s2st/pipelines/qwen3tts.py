"""model_type: Qwen3TTS — text -> 24 kHz speech through the official qwen-tts package (CustomVoice).

torchaudio: ``import qwen_tts`` imports torchaudio, whose newest PyPI release (2.11.1) is a CUDA
build only (no torchaudio for torch 2.13, no CPU wheel on PyPI): beside CPU torch its extension
fails with ``OSError: libc10_cuda.so``. qwen-tts needs only pure-Python torchaudio
(``compliance.kaldi.fbank``, 25 Hz tokenizer), and torchaudio treats a missing ``lib/*.so`` as
"extension unavailable" (``torchaudio._extension.utils._load_lib``). So the extra installs it and,
only when the extension cannot load, deletes the compiled libraries (fairseq imports still work):
    pip install -c constraints.txt "qwen-tts==0.1.1"      # constraints: torch==<the installed torch>
    python -c "import torchaudio" 2>/dev/null ||
        rm -f "$(dirname "$(python -c 'import importlib.util as u;print(u.find_spec("torchaudio").origin)')")"/lib/*.so

Stage keys (stage1; ``path`` is resolved against the YAML's folder):
    path            local model directory (required); its model-assets.json is checked before loading
    manifest        another model-assets.json to check against (default: <path>/model-assets.json)
    speaker         default voice for samples without "voice" (default Vivian)
    language        default language for samples without "language" (default Auto)
    max_new_tokens  codec frames to generate at most (default: the model's generation_config.json)
    dtype           float32 | bfloat16 | float16 (default float32)
    seed            default seed for samples without "seed" (default 0)
Samples are service workload items {"id", "text", "language"?, "voice"?, "seed"?, "instruct"?}.

The package does not stream (the waveform is decoded after generation). ``stream(sample, emit, ...)``
does, without changing what is generated: the same ``generate_custom_voice`` call runs, a forward hook
on the talker receives each codec frame as the talker makes it (the 16 codes its forward step returns),
and every ``chunk_frames`` frames are decoded at once by the 12 Hz tokenizer's decoder with
``left_context_frames`` frames of left context, exactly as the tokenizer's own ``chunked_decode`` does
(which the non-streamed path runs with chunk 300, context 25). At the end, the package's final decode
is answered from the chunks already decoded (the codes it passes are checked equal to the streamed
frames) and only the remaining frames are decoded. With chunk 300 / context 25 the streamed audio is
bit-equal to the non-streamed one; with smaller chunks it differs at the seams (tests/test_qwen_stream.py
states the bound).
"""
from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..assets import MANIFEST_NAME, check_manifest
from ..errors import S2STError

DEFAULT_SPEAKER = "Vivian"
DEFAULT_LANGUAGE = "Auto"
DTYPES = ("float32", "bfloat16", "float16")
# workload language codes -> the language names the model config lists
LANGUAGE_CODES = {
    "zh": "Chinese", "en": "English", "ja": "Japanese", "ko": "Korean", "de": "German", "fr": "French",
    "ru": "Russian", "pt": "Portuguese", "es": "Spanish", "it": "Italian", "auto": "Auto",
}
INSTALL_HINT = "install the qwen extra: pip install -e '.[qwen]' in the pytest-s2st clone"


def normalize_language(value: str) -> str:
    """'en', 'en-US', 'zh_CN', 'english', 'Chinese' -> 'English' / 'Chinese' (other names pass through)."""
    text = value.strip()
    code = text.replace("_", "-").split("-")[0].lower()
    if code in LANGUAGE_CODES:
        return LANGUAGE_CODES[code]
    return text[:1].upper() + text[1:].lower() if text else text


FLASH_ATTN_BANNER = "flash-attn is not installed"


@contextlib.contextmanager
def quiet_banner():
    """qwen_tts prints a flash-attn banner on stdout when first imported (a box of asterisks around "flash-attn is
    not installed ... Please install flash-attn for faster inference"): on CPU it says nothing useful, so it is
    dropped; anything else printed meanwhile goes to stderr (stdout stays machine-readable)."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            yield
    finally:
        kept = [line for line in buf.getvalue().splitlines()
                if line.strip(" *") and FLASH_ATTN_BANNER not in line]
        if kept:
            print("\n".join(kept), file=sys.stderr)


def _import_qwen_tts(where: str) -> Any:
    try:
        with quiet_banner():
            import qwen_tts  # lazy: optional
    except ImportError as exc:
        raise S2STError(f"{where}: model_type 'Qwen3TTS' needs qwen-tts ({exc}); {INSTALL_HINT}") from None
    except OSError as exc:  # torchaudio's CUDA extension beside a CPU torch
        raise S2STError(
            f"{where}: importing qwen-tts failed ({' '.join(str(exc).split())}); a torchaudio extension that does "
            "not match torch: see pytest_s2st/pipelines/qwen3tts.py for the install step"
        ) from None
    return qwen_tts


class Qwen3TTSStage:
    """One measured call: generate_custom_voice for one text, seeded, decoded to a waveform."""

    name = "tts"

    def __init__(self, model: Any, max_new_tokens: int | None):
        self.model = model
        self.max_new_tokens = max_new_tokens

    def forward(self, x: Mapping[str, Any]) -> dict[str, Any]:
        import torch  # lazy: heavy

        kwargs = {} if self.max_new_tokens is None else {"max_new_tokens": self.max_new_tokens}
        torch.manual_seed(x["seed"])  # sampling is the only randomness; same seed -> same waveform
        with torch.inference_mode():
            wavs, sr = self.model.generate_custom_voice(
                x["text"], x["speaker"], x["language"], instruct=x.get("instruct"), **kwargs
            )
        return {"waveform": np.asarray(wavs[0], dtype=np.float32).reshape(-1), "sample_rate": int(sr)}

    def to_next_input(self, output: Any) -> Any:
        return output


class _ChunkDecoder:
    """Codec frames in, as the talker makes them; each complete chunk decoded with left context and emitted."""

    def __init__(self, tokenizer: Any, chunk_frames: int, left_context_frames: int, emit: Any, eos_id: int):
        self.decoder = tokenizer.model.decoder
        self.device = tokenizer.device
        self.sample_rate = int(tokenizer.model.get_output_sample_rate())
        self.upsample = int(self.decoder.total_upsample)
        self.chunk, self.left, self.emit, self.eos_id = chunk_frames, left_context_frames, emit, eos_id
        self.frames: list[Any] = []
        self.pieces: list[np.ndarray] = []
        self.sent = 0  # frames decoded and emitted
        self.stopped = False

    def add(self, codec_ids: Any) -> None:
        """One talker step's output frame (batch 1, 16 codes); None at the prefill step."""
        if codec_ids is None or self.stopped:
            return
        frame = codec_ids[0]
        if int(frame[0]) == self.eos_id:  # the package trims the codes at the first EOS too
            self.stopped = True
            return
        self.frames.append(frame)
        while len(self.frames) - self.sent >= self.chunk:
            self._decode(self.sent + self.chunk)

    def _decode(self, end: int) -> None:
        import torch  # lazy: heavy

        context = min(self.left, self.sent)  # chunked_decode's rule: all there is, up to left_context_size
        codes = torch.stack(self.frames[self.sent - context:end], dim=-1).unsqueeze(0).to(self.device)
        wav = self.decoder(codes.clamp(min=0))[..., context * self.upsample:]
        piece = wav.reshape(-1).to(torch.float32).cpu().numpy()
        self.pieces.append(piece)
        self.sent = end
        self.emit(piece, self.sample_rate)

    def finish(self, codes: Any) -> np.ndarray:
        """The package's final codes (T, 16): they must be the frames streamed so far; decode the rest."""
        import torch  # lazy: heavy

        total = int(codes.shape[0])
        streamed = torch.stack(self.frames[:total]) if self.frames else codes[:0]
        if self.sent > total or streamed.shape != codes.shape or not torch.equal(streamed.cpu(), codes.cpu()):
            raise RuntimeError(f"streamed codec frames ({len(self.frames)}, {self.sent} decoded) differ from the "
                               f"{total} frames the package generated")
        self.frames = self.frames[:total]
        if self.sent < total:
            self._decode(total)
        return np.concatenate(self.pieces) if self.pieces else np.zeros(0, np.float32)


class _StreamedTokenizer:
    """Stands in for the speech tokenizer during one streamed call: its decode returns what was streamed."""

    def __init__(self, real: Any, chunks: _ChunkDecoder):
        self._real, self._chunks = real, chunks

    def decode(self, encoded: Any) -> tuple[list[np.ndarray], int]:
        if not isinstance(encoded, list) or len(encoded) != 1:
            raise RuntimeError("streaming decodes one request at a time")
        return [self._chunks.finish(encoded[0]["audio_codes"])], self._chunks.sample_rate

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class Qwen3TTSPipeline:
    model_type = "Qwen3TTS"
    streaming = False  # the package returns whole waveforms; the server chunks after generation

    def __init__(self, model: Any, model_dir: Path, hashes: dict[str, str], *, speaker: str, language: str,
                 seed: int, max_new_tokens: int | None, where: str):
        self.model = model
        self.model_dir = model_dir
        self._hashes = hashes
        self.speaker, self.language, self.seed = speaker, language, seed
        self.where = where
        self.speakers = {s.lower() for s in (model.get_supported_speakers() or [])}
        self.languages = {s.lower() for s in (model.get_supported_languages() or [])}
        self.stages = [Qwen3TTSStage(model, max_new_tokens)]

    def _check_choice(self, kind: str, value: str, allowed: set[str], at: str) -> None:
        if allowed and value.lower() not in allowed:
            raise S2STError(
                f"{self.where}{at}: {kind} {value!r} is not supported by {self.model_dir}; "
                f"supported: {', '.join(sorted(allowed))}"
            )

    def prepare_sample(self, sample: Any) -> dict[str, Any]:
        if not isinstance(sample, Mapping) or "net_input" in sample:
            raise S2STError(
                f"{self.where}: Qwen3TTS takes text samples {{id, text, language?, voice?, seed?, instruct?}} "
                f"(a service workload), got {type(sample).__name__}"
                + (" with net_input (a speech dataset)" if isinstance(sample, Mapping) else "")
            )
        sid = sample.get("id")
        text = sample.get("text")
        if not isinstance(text, str) or not text.strip():
            raise S2STError(f"{self.where}: sample {sid!r}: 'text' must be a non-empty string, got {text!r}")
        language = sample.get("language") or self.language
        speaker = sample.get("voice") or self.speaker
        seed = sample.get("seed")
        seed = self.seed if seed is None else seed
        if not isinstance(language, str) or not isinstance(speaker, str):
            raise S2STError(f"{self.where}: sample {sid!r}: 'language' and 'voice' must be strings")
        # torch.manual_seed takes a negative seed (as two's complement), as vLLM-Omni's seed field does
        if isinstance(seed, bool) or not isinstance(seed, int) or not -2**63 <= seed < 2**63:
            raise S2STError(f"{self.where}: sample {sid!r}: 'seed' must be an integer in [-2**63, 2**63), got {seed!r}")
        language = normalize_language(language)
        self._check_choice("language", language, self.languages, f": sample {sid!r}")
        self._check_choice("voice", speaker, self.speakers, f": sample {sid!r}")
        out = {"id": sid, "text": text, "language": language, "speaker": speaker, "seed": seed}
        instruct = sample.get("instruct")
        if instruct:
            out["instruct"] = str(instruct)
        return out

    def stream(self, x: Mapping[str, Any], emit: Any, chunk_frames: int, left_context_frames: int) -> dict[str, Any]:
        """Generate as forward() does (same call, same seed, same codes), emitting each decoded chunk as
        ``emit(float32 waveform piece, sample_rate)`` as soon as it exists; returns forward()'s output."""
        inner = self.model.model
        real = inner.speech_tokenizer
        chunks = _ChunkDecoder(real, chunk_frames, left_context_frames, emit,
                               int(inner.config.talker_config.codec_eos_token_id))
        handle = inner.talker.register_forward_hook(lambda module, args, out: chunks.add(out.hidden_states[1]))
        inner.speech_tokenizer = _StreamedTokenizer(real, chunks)
        try:
            return self.stages[0].forward(x)
        finally:
            inner.speech_tokenizer = real
            handle.remove()

    def assets(self) -> dict[str, str]:
        return {str(self.model_dir / rel): digest for rel, digest in self._hashes.items()}

    def close(self) -> None:
        self.model = None
        self.stages = []


def _int_key(stage: Mapping[str, Any], key: str, where: str, default: int | None, minimum: int) -> int | None:
    value = stage.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise S2STError(f"{where} (stage1.{key}): must be an integer >= {minimum}, got {value!r}")
    return value


def build(stages: list[dict[str, Any]], *, model_type: str = "Qwen3TTS", device: str,
          config_path: Path) -> Qwen3TTSPipeline:
    where = str(config_path)
    if len(stages) != 1:
        raise S2STError(f"{where}: model_type 'Qwen3TTS' has one stage (stage1), got {len(stages)}")
    stage = stages[0]
    path = stage.get("path")
    if not isinstance(path, str) or not path:
        raise S2STError(f"{where} (stage1.path): required: the local Qwen3-TTS model directory")
    model_dir = Path(path)
    if not model_dir.is_dir():
        raise S2STError(f"{where} (stage1.path): model directory {model_dir} does not exist")
    dtype_name = stage.get("dtype", "float32")
    if dtype_name not in DTYPES:
        raise S2STError(f"{where} (stage1.dtype): {dtype_name!r} is not one of {', '.join(DTYPES)}")
    max_new_tokens = _int_key(stage, "max_new_tokens", where, None, 1)
    seed = _int_key(stage, "seed", where, 0, 0)
    speaker, language = stage.get("speaker", DEFAULT_SPEAKER), stage.get("language", DEFAULT_LANGUAGE)
    for key, value in (("speaker", speaker), ("language", language)):
        if not isinstance(value, str) or not value:
            raise S2STError(f"{where} (stage1.{key}): must be a non-empty string, got {value!r}")

    manifest = stage.get("manifest") or model_dir / MANIFEST_NAME
    hashes = check_manifest(model_dir, manifest)  # refuse weights other than the ones the manifest names

    qwen_tts = _import_qwen_tts(where)
    import torch  # lazy: heavy

    try:
        model = qwen_tts.Qwen3TTSModel.from_pretrained(
            str(model_dir), device_map=device, dtype=getattr(torch, dtype_name)
        )
    except Exception as exc:
        raise S2STError(f"{where}: cannot load {model_dir}: {type(exc).__name__}: "
                        f"{' '.join(str(exc).split())}") from None
    pipeline = Qwen3TTSPipeline(model, model_dir, hashes, speaker=speaker, language=normalize_language(language),
                                seed=seed, max_new_tokens=max_new_tokens, where=where)
    pipeline._check_choice("language", pipeline.language, pipeline.languages, " (stage1.language)")
    pipeline._check_choice("voice", speaker, pipeline.speakers, " (stage1.speaker)")
    return pipeline
