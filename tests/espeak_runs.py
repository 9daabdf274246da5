"""Run dirs of real espeak-ng speech for the quality tests (verdict, scorers, the assess CLI, whisper): the
collect layout (requests.jsonl, wav/, summary.json) with espeak-ng as the system under test, and
hand-written scores bound to the real WAV hashes."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import soundfile as sf

from pytest_s2st.quality import Policy, pcm_sha256

# test voice name -> espeak-ng voice per language (klatt variants: pocketsphinx reads them best)
VOICES = {"ryan": {"en": "en-us+klatt2", "zh": "cmn+klatt2"}, "aiden": {"en": "en-us+klatt5", "zh": "cmn+klatt5"}}
# (language, text, voice): sentences pocketsphinx mostly gets right on these voices
EN_ITEMS = [("en", "the weather is nice today", "ryan"),
            ("en", "she bought three red apples at the market", "aiden"),
            ("en", "i would like a cup of coffee", "ryan"),
            ("en", "the children are playing in the park", "aiden")]
ZH_ITEMS = [("zh", "今天天气很好", "ryan"), ("zh", "我们明天早上在车站见面", "aiden")]
ANCHOR_TEXT = "my voice is my passport, verify me and let me in"


def espeak(text: str, espeak_voice: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["espeak-ng", "-v", espeak_voice, "-s", "150", "-w", str(path), text], check=True)


def make_run(out: Path, items, *, concurrency: int = 1, warmups: int = 1, ttfa: float = 0.5, rtf: float = 0.8,
             voice_map=None, transform=None, policy: Policy | None = None, cache: Path | None = None) -> Path:
    """A run dir in the collect layout, with espeak-ng as the system under test.
    Warm-ups repeat the first items. transform(rid, pcm int16, rate) -> pcm alters the candidate's audio;
    ttfa / rtf set the (synthetic) request timestamps."""
    voice_map = voice_map or VOICES
    (out / "wav").mkdir(parents=True, exist_ok=True)
    plan = [(True, i, items[i % len(items)]) for i in range(warmups)] + [(False, i, it) for i, it in enumerate(items)]
    lines, t = [], 100.0
    for warm, index, (lang, text, voice) in plan:
        rid = f"c{concurrency}-{'w' if warm else 'r'}{index}"
        ev = voice_map[voice][lang]
        src = (cache or out / "src") / f"{ev}-{hashlib.md5(text.encode()).hexdigest()[:12]}.wav"
        if not src.exists():
            espeak(text, ev, src)
        pcm, rate = sf.read(str(src), dtype="int16")
        if transform is not None:
            pcm = transform(rid, pcm, rate)
        sf.write(str(out / "wav" / f"{rid}.wav"), pcm, rate, subtype="PCM_16")
        secs = len(pcm) / rate
        rec = {"id": rid, "concurrency": concurrency, "index": index, "warmup": warm, "text": text, "language": lang,
               "voice": voice, "seed": index, "send_t": t, "first_audio_t": t + ttfa, "done_t": t + rtf * secs,
               "audio_seconds": secs, "sample_rate": rate, "status": "ok", "error": None,
               "pcm_sha256": pcm_sha256(out / "wav" / f"{rid}.wav")}
        lines.append(json.dumps(rec, ensure_ascii=False))
        t += 10.0
    (out / "requests.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    summary = {"concurrency": concurrency, "summary": {}, "identity": {"name": "espeak-ng"}}
    if policy is not None:
        summary["policy"] = policy.to_dict()
    (out / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    if cache is None:
        shutil.rmtree(out / "src")
    return out


def records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "requests.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]


def scores_for(base: Path, cand: Path, scorer_id: str = "sid-1", *, er=None, sim=None) -> dict:
    """Hand-written scores bound to the real WAV hashes. er / sim: (side, rid) -> value overrides."""
    out = {"scorer_id": scorer_id}
    for side, run in (("baseline", base), ("candidate", cand)):
        out[side] = [{"id": r["id"], "pcm_sha256": pcm_sha256(run / "wav" / f"{r['id']}.wav"),
                      "error_rate": (er or {}).get((side, r["id"]), 0.25),
                      "speaker_similarity": (sim or {}).get((side, r["id"]), 0.85)} for r in records(run)]
    return out
