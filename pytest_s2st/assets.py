"""Model asset manifests: ``model-assets.json`` maps each file's path (relative, POSIX) to its size
and SHA256. Written once when a model directory is staged, checked before the model is loaded,
so a benchmark never runs on weights other than the ones it names.

Pure standard library: importable without torch or any model package.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping

from .errors import S2STError
from .inputs import load_json

MANIFEST_NAME = "model-assets.json"
# An unlisted file with one of these suffixes could be read by a loader (an extra weight shard, a
# config, a tokenizer file), so it makes the directory differ from the manifest; anything else
# (README.md, hidden files such as .gitattributes or a hub .cache/) is ignored.
LOADABLE_SUFFIXES = frozenset({
    ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".json", ".txt", ".model", ".py",
    ".npz", ".npy", ".onnx", ".tiktoken", ".jinja", ".yaml", ".yml",
})


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(model_dir: Path) -> list[str]:
    """Relative POSIX paths of the regular files under model_dir, hidden ones and the manifest left out."""
    out = []
    for root, dirs, names in os.walk(model_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            if name.startswith(".") or (name == MANIFEST_NAME and Path(root) == model_dir):
                continue
            out.append((Path(root) / name).relative_to(model_dir).as_posix())
    return sorted(out)


def write_manifest(model_dir: str | os.PathLike) -> Path:
    """Write model_dir/model-assets.json over every file in the directory; return its path."""
    model_dir = Path(model_dir)
    entries = {}
    for rel in _files(model_dir):
        path = model_dir / rel
        entries[rel] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    out = model_dir / MANIFEST_NAME
    out.write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def read_manifest(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise S2STError(f"{path}: asset manifest not found (write it with pytest_s2st.assets.write_manifest)")
    data = load_json(path, "asset manifest")
    if not isinstance(data, dict) or not data:
        raise S2STError(f"{path}: asset manifest must be a non-empty mapping of file -> {{size, sha256}}")
    for rel, entry in data.items():
        if (not isinstance(entry, dict) or not isinstance(entry.get("size"), int)
                or not isinstance(entry.get("sha256"), str) or len(entry["sha256"]) != 64):
            raise S2STError(f"{path}: entry {rel!r} must be {{\"size\": int, \"sha256\": 64 hex digits}}")
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise S2STError(f"{path}: entry {rel!r} must be a path inside the model directory")
    return data


def check_manifest(
    model_dir: str | os.PathLike, manifest: str | os.PathLike | Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Compare model_dir with its manifest (default: model_dir/model-assets.json; or a path, or an
    already-read mapping). Return {relative path: sha256}; raise S2STError naming the first file
    that is missing, differs in size or SHA256, or is an unlisted loadable file."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise S2STError(f"{model_dir}: model directory does not exist")
    if isinstance(manifest, Mapping):
        entries, where = dict(manifest), "the given manifest"
    else:
        mpath = Path(manifest) if manifest is not None else model_dir / MANIFEST_NAME
        entries, where = read_manifest(mpath), str(mpath)
    for rel in sorted(entries):
        path = model_dir / rel
        want = entries[rel]
        if not path.is_file():
            raise S2STError(f"{path}: listed in {where} but missing")
        size = path.stat().st_size
        if size != want["size"]:
            raise S2STError(f"{path}: size {size} differs from {want['size']} in {where}")
        digest = sha256_file(path)
        if digest != want["sha256"]:
            raise S2STError(f"{path}: SHA256 {digest[:16]}... differs from {want['sha256'][:16]}... in {where}")
    for rel in _files(model_dir):
        if rel not in entries and Path(rel).suffix.lower() in LOADABLE_SUFFIXES:
            raise S2STError(f"{model_dir / rel}: not listed in {where} (an unlisted file a loader could read)")
    return {rel: entries[rel]["sha256"] for rel in sorted(entries)}


def main(argv: list[str] | None = None) -> int:
    """python -m pytest_s2st.assets write|check MODEL_DIR"""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in ("write", "check"):
        print("usage: python -m pytest_s2st.assets write|check MODEL_DIR", file=sys.stderr)
        return 2
    try:
        if args[0] == "write":
            print(write_manifest(args[1]))
        else:
            print(f"{args[1]}: {len(check_manifest(args[1]))} files match {MANIFEST_NAME}")
    except S2STError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
