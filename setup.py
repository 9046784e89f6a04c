"""Install captionlib (the library) and captionbin (its command-line binaries)."""

from pathlib import Path

from setuptools import find_packages, setup

# One console script per binary captionbin/caption_*.py, named as the binary (caption_infer runs
# captionbin.caption_infer:main), so that tools/venv/bin/caption_infer works from any shell; taken
# from the directory listing, so a new binary is installed by the next "pip install -e ."
HERE = Path(__file__).resolve().parent
console_scripts = sorted(f"{p.stem} = captionbin.{p.stem}:main" for p in (HERE / "captionbin").glob("caption_*.py"))

install_requires = [
    # torch is not pinned exactly: users bring the build that matches their CUDA.
    "torch>=2.1",
    "numpy",
    "kaldiio>=2.18",
    "h5py",
    "sentencepiece",
    "configargparse>=1.5",
    "pyyaml",
    "soundfile",
    "soxr",
    "librosa>=0.10",
    "tqdm",
    "tensorboard",
    "pycocoevalcap",
    "matplotlib",
    "scipy",
    "scikit-learn",  # average precision (mAP) of caption_pretrain_tagging; stop words of caption keywords
    "textblob-aptagger==0.2.0",  # POS tagger model (in the wheel) for multitask RL attributes
    "nltk",  # runs that model (nltk.tag.perceptron)
    "Pillow",  # image loading (captionlib.visual)
    "av>=12",  # PyAV: video decoding (captionlib.visual); torchvision stays optional (imported lazily)
]
extras_require = {
    # lint-imports checks the layers of .importlinter; ruff lints (pyproject.toml); pytest-xdist runs make test's
    # workers; kaldi-native-fbank: the reference the Kaldi fbank front end (KaldiFbank) is tested against
    "test": ["pytest", "pytest-xdist>=3.8", "import-linter>=2.1", "ruff>=0.17,<0.18", "kaldi-native-fbank"],
    "w2v": ["gensim>=4"],
}
extras_require["all"] = sorted({p for v in extras_require.values() for p in v})

setup(
    name="captionlib",
    version="0.1.0",
    description="Kaldi/ESPnet-style recipes for captioning with reinforcement learning",
    packages=find_packages(include=["captionlib", "captionlib.*", "captionbin", "captionbin.*"]),
    python_requires=">=3.9",
    install_requires=install_requires,
    extras_require=extras_require,
    entry_points={"console_scripts": console_scripts},
)
